"""Kept for old imports: the seed's modules live in attention_client/seed_modules.py."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_client"))
from seed_modules import *  # noqa: E402,F401,F403
from seed_modules import (CrossAttention, MultiHeadSelfAttention, SelfAttention,  # noqa: E402,F401
                          scaled_dot_product_attention)
