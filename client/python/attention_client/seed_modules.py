"""The PyTorch reference modules of the seed documents (shared/seeds/000_*).

SelfAttention and CrossAttention are single-head, scale by sqrt(embed_dim)
and have no output projection. MultiHeadSelfAttention scales by
sqrt(head_dim) and has an output projection. Weights follow nn.Linear.
"""
import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    def __init__(self, embed_dim):
        super().__init__()
        self.embed_dim = embed_dim
        self.q_linear = nn.Linear(embed_dim, embed_dim)
        self.k_linear = nn.Linear(embed_dim, embed_dim)
        self.v_linear = nn.Linear(embed_dim, embed_dim)
        self.scale = embed_dim ** 0.5

    def forward(self, x):
        q, k, v = self.q_linear(x), self.k_linear(x), self.v_linear(x)
        attn = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / self.scale, dim=-1)
        return torch.bmm(attn, v)


class CrossAttention(SelfAttention):
    """Queries from the decoder, keys and values from the encoder; the same
    layers (and state_dict names) as SelfAttention."""

    def forward(self, x_dec, x_enc):
        q, k, v = self.q_linear(x_dec), self.k_linear(x_enc), self.v_linear(x_enc)
        attn = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / self.scale, dim=-1)
        return torch.bmm(attn, v)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        assert embed_dim % num_heads == 0
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.q = nn.Linear(embed_dim, embed_dim)
        self.k = nn.Linear(embed_dim, embed_dim)
        self.v = nn.Linear(embed_dim, embed_dim)
        self.out = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / (self.head_dim ** 0.5)
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(out.transpose(1, 2).contiguous().view(b, t, d))


def scaled_dot_product_attention(query, key, value):
    """The seed's function (001_*): returns the output and the weights."""
    scores = torch.matmul(query, key.transpose(-2, -1))
    scores /= torch.sqrt(torch.tensor(query.size(-1), dtype=torch.float32))
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, value), weights
