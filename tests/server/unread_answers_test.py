"""Memory that gRPC holds outside --max-inflight (issue 14, item 3).

Clients here speak HTTP/2 themselves (python3-h2), so that they can do what
no gRPC library does: open more streams than the server allows, and send
large requests while never reading the answers (their receive window is 0,
so not one byte of an answer can reach them). A well-behaved Python gRPC
client keeps calling meanwhile.

Run by ctest with ATTN_SERVER_BIN set and PYTHONPATH holding the attention.v1
stubs and client/python.
"""
import json
import os
import re
import select
import socket
import struct
import subprocess
import threading
import time
import unittest
import urllib.request

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings
import numpy as np
from attention.v1 import attention_pb2, attention_pb2_grpc
from attention_client import AttentionClient, to_tensor

SERVER = os.environ["ATTN_SERVER_BIN"]
STREAMS = 16    # --max-streams
QUOTA_MB = 48   # --memory-quota-mb
# docs/server.md, "Memory held outside the calls": RSS stays under its resting value
# plus the quota plus a margin: one call per connection past the quota (4 x 4
# MiB here), the calls computing (--threads of them, each with its request,
# parsed copy, output and answer: 2 x 8 MiB), and the allocator's and gRPC's
# own buffers. Measured: 113-131 MiB peaks from 35 MiB at rest; 321 MiB with
# no quota and no stream limit.
MARGIN_MB = 80


def start_server(*args):
    """(process, gRPC port, metrics port) once SERVING."""
    proc = subprocess.Popen([SERVER, "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = metrics = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if m := re.search(r"listening on [\d.]+:(\d+)", line):
            port = int(m.group(1))
        if m := re.search(r"metrics http://[\d.]+:(\d+)/metrics", line):
            metrics = int(m.group(1))
        if "SERVING" in line and port and metrics:
            # Keep draining its log, or a full pipe would stall the server.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, port, metrics
    proc.kill()
    raise RuntimeError("attention-server did not start")


def rss_mib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(field + " not in /proc/status")


def gauge(metrics_port, name):
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    m = re.search(rf"^{name} (\S+)$", body.decode(), re.M)
    return float(m.group(1))


class IgnoresStreamLimit(h2.connection.H2Connection):
    """h2 enforces the server's stream limit on its own side; a broken or
    hostile client does not."""

    @property
    def open_outbound_streams(self):
        return 0


class RawConnection:
    """An HTTP/2 connection that sends gRPC calls and reads only when told to."""

    def __init__(self, port, receive_window=65535):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.authority = f"127.0.0.1:{port}"
        self.conn = IgnoresStreamLimit(h2.config.H2Configuration(client_side=True))
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE:
                                         receive_window})
        self.conn.initiate_connection()
        self.events = []
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self, seconds):
        """Reads and handles frames for up to `seconds`."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([self.sock], [], [], min(left, 0.05))
            if not ready:
                continue
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return
            if not data:
                return
            self.events += self.conn.receive_data(data)
            self.flush()

    def wait_for(self, predicate, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end and not predicate():
            self.pump(0.05)
        return predicate()

    def open_stream(self, method):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                     (":path", "/attention.v1.AttentionService/" + method),
                                     (":authority", self.authority),
                                     ("content-type", "application/grpc"), ("te", "trailers")])
        self.flush()
        return sid

    def send_message(self, sid, message, seconds=30):
        """Sends one gRPC message and ends the stream, reading only the flow
        control it needs."""
        data = b"\0" + struct.pack(">I", len(message)) + message
        end = time.monotonic() + seconds
        while data:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                if time.monotonic() > end:
                    raise TimeoutError("the server never opened its window")
                self.pump(0.05)
                continue
            chunk, data = data[:window], data[window:]
            self.conn.send_data(sid, chunk, end_stream=not data)
            self.flush()

    def resets(self):
        return {e.stream_id: e.error_code for e in self.events
                if isinstance(e, h2.events.StreamReset)}

    def close(self):
        self.sock.close()


def large_request(rows=512, dim=1024):
    """A 2 MiB self-attention request whose answer is 2 MiB too."""
    x = np.random.default_rng(rows).standard_normal((rows, dim)).astype(np.float32)
    return attention_pb2.AttentionRequest(query=to_tensor(x)).SerializeToString()


class StreamLimit(unittest.TestCase):
    def test_a_connection_past_max_streams_is_dropped(self):
        proc, port, _ = start_server("--max-streams", str(STREAMS), "--threads", "1")
        try:
            c = RawConnection(port)
            self.assertTrue(c.wait_for(lambda: any(
                isinstance(e, h2.events.RemoteSettingsChanged) for e in c.events), 10))
            self.assertEqual(c.conn.remote_settings.max_concurrent_streams, STREAMS)
            c.pump(0.2)  # our ACK of its settings is out: the limit holds from here
            # Streams that send headers and never their message stay open.
            for _ in range(STREAMS):
                c.open_stream("Attention")
            c.pump(0.5)
            self.assertEqual(c.resets(), {})
            # One more breaks HTTP/2's rules: gRPC 1.51 drops the connection
            # (each of its calls ends UNAVAILABLE), not just the stream.
            c.open_stream("Attention")
            self.assertTrue(c.wait_for(lambda: len(c.resets()) >= STREAMS, 10), c.resets())
            codes = {dict(e.headers).get(b"grpc-status") for e in c.events
                     if isinstance(e, h2.events.ResponseReceived)}
            self.assertEqual(codes, {b"14"})
            c.sock.settimeout(5)
            self.assertEqual(c.sock.recv(100), b"")
            c.close()
            # gRPC clients keep to the limit: 3 x STREAMS calls at once on one
            # connection all succeed (the client queues the excess).
            with AttentionClient(f"127.0.0.1:{port}") as good:
                x = np.ones((8, 64), np.float32)
                calls = [good.stub.MultiHeadAttention.future(
                    attention_pb2.MultiHeadAttentionRequest(query=to_tensor(x),
                                                            model="demo-mha-small"), timeout=30)
                         for _ in range(3 * STREAMS)]
                self.assertEqual([len(f.result().output.shape) for f in calls],
                                 [2] * (3 * STREAMS))
        finally:
            proc.terminate()
            proc.wait(timeout=15)


class UnreadAnswers(unittest.TestCase):
    def test_clients_that_never_read_stay_within_the_quota(self):
        proc, port, metrics = start_server("--max-streams", str(STREAMS), "--threads", "2",
                                           "--memory-quota-mb", str(QUOTA_MB))
        good = AttentionClient(f"127.0.0.1:{port}", timeout=20)
        # Under memory pressure gRPC's quota may close the good client's
        # connection while it is idle; a client retries UNAVAILABLE on a new
        # one, as docs/deployment.md tells clients to.
        good.channel.close()
        good.channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
            ("grpc.service_config", json.dumps({"methodConfig": [{
                "name": [{"service": "attention.v1.AttentionService"}],
                "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s",
                                "maxBackoff": "0.5s", "backoffMultiplier": 2,
                                "retryableStatusCodes": ["UNAVAILABLE"]}}]}))])
        good.stub = attention_pb2_grpc.AttentionServiceStub(good.channel)
        x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
        try:
            for _ in range(20):
                good.multi_head_attention(x, num_heads=4, model="demo-mha-small")
            time.sleep(0.5)
            base = rss_mib(proc.pid)
            request = large_request()
            for wave in range(2):
                served, failures, stop = [0], [], threading.Event()

                def keep_calling():
                    for _ in range(2000):  # bounded: about 2000 x 10 ms at most
                        if stop.is_set():
                            return
                        try:
                            good.multi_head_attention(x, num_heads=4, model="demo-mha-small")
                            served[0] += 1
                        except Exception as e:  # noqa: BLE001 - any failure fails the test
                            failures.append(repr(e))
                        time.sleep(0.005)

                caller = threading.Thread(target=keep_calling)
                caller.start()
                # Four connections, each sending STREAMS large calls and
                # reading none of the answers (a receive window of 0).
                bad = [RawConnection(port, receive_window=0) for _ in range(4)]
                for c in bad:
                    c.wait_for(lambda c=c: c.conn.remote_settings.max_concurrent_streams
                               == STREAMS, 10)
                dropped = 0
                for c in bad:
                    for _ in range(STREAMS):
                        try:
                            c.send_message(c.open_stream("Attention"), request)
                        except (BrokenPipeError, ConnectionResetError):
                            # Under memory pressure gRPC's resource quota
                            # closes connections that wait idle: allowed.
                            dropped += 1
                            break
                time.sleep(2)  # the admitted ones compute and their answers wait
                held = gauge(metrics, "attn_held_bytes") / 2**20
                peak = rss_mib(proc.pid, "VmHWM")
                stop.set()
                caller.join(60)
                print(f"wave {wave}: RSS {base:.0f} MiB at rest, peak {peak:.0f} MiB; held "
                      f"{held:.1f} MiB; {served[0]} good calls served meanwhile; "
                      f"{dropped} of the 4 connections closed by gRPC")
                self.assertLessEqual(peak, base + QUOTA_MB + MARGIN_MB)
                self.assertLessEqual(held, QUOTA_MB + 4 * 4)
                self.assertGreaterEqual(held, QUOTA_MB / 2, "the unread answers filled the quota")
                self.assertEqual(failures, [])
                self.assertGreater(served[0], 10)
                # Refused calls got their RESOURCE_EXHAUSTED status (trailers
                # need no window); the server kept its answers for the rest.
                for c in bad:
                    c.pump(0.2)
                codes = [dict(e.headers).get(b"grpc-status") for c in bad for e in c.events
                         if isinstance(e, (h2.events.TrailersReceived, h2.events.ResponseReceived))]
                self.assertIn(b"8", codes)
                for c in bad:
                    c.close()
                # They went away: everything they held is given back.
                end = time.monotonic() + 10
                while time.monotonic() < end and gauge(metrics, "attn_held_bytes") > 0:
                    time.sleep(0.1)
                self.assertEqual(gauge(metrics, "attn_held_bytes"), 0)
                self.assertEqual(good.multi_head_attention(x, num_heads=4, model="demo-mha-small")[0]
                                 .shape, (16, 64))
        finally:
            good.close()
            proc.terminate()
            proc.wait(timeout=15)


if __name__ == "__main__":
    unittest.main()
