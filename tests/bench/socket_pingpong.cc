// The kernel's own round trip, without gRPC: two processes pass 64 bytes
// back and forth over a Unix stream socket (in a temp dir) and over
// loopback TCP (127.0.0.1, port 0, TCP_NODELAY), blocking reads and writes.
// What is left of a Unix socket's advantage once both sides sleep between
// messages, as a gRPC server and client do: the floor under
// unix_socket_bench.sh's ratio. Prints one JSON line per round.
//   socket-pingpong-bench [ROUNDS] [TRIPS]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kBytes = 64, kWarmup = 500;
constexpr int kConnectMs = 10000;  // the child's connect, bounded: it may fail

[[noreturn]] void Fail(const char* what) {
  std::perror(what);
  std::exit(1);
}

void Exchange(int fd, char* buf, bool first_write) {
  if (first_write && write(fd, buf, kBytes) != kBytes) Fail("write");
  for (int got = 0; got < kBytes;) {
    const ssize_t r = read(fd, buf + got, static_cast<size_t>(kBytes - got));
    if (r <= 0) Fail("read");
    got += static_cast<int>(r);
  }
  if (!first_write && write(fd, buf, kBytes) != kBytes) Fail("write");
}

// Microseconds a round trip, over `trips` after a warm-up.
double RoundTripUs(bool unix_socket, int trips, const std::string& dir) {
  sockaddr_un ua{};
  sockaddr_in ia{};
  const int listener = socket(unix_socket ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
  if (listener < 0) Fail("socket");
  sockaddr* addr;
  socklen_t len;
  if (unix_socket) {
    ua.sun_family = AF_UNIX;
    std::snprintf(ua.sun_path, sizeof ua.sun_path, "%s/pp.sock", dir.c_str());
    addr = reinterpret_cast<sockaddr*>(&ua);
    len = sizeof ua;
  } else {
    ia.sin_family = AF_INET;
    ia.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr = reinterpret_cast<sockaddr*>(&ia);
    len = sizeof ia;
  }
  if (bind(listener, addr, len) != 0) Fail("bind");
  if (!unix_socket && getsockname(listener, addr, &len) != 0) Fail("getsockname");
  if (listen(listener, 1) != 0) Fail("listen");
  const int one = 1;
  const pid_t child = fork();
  if (child < 0) Fail("fork");
  if (child == 0) {  // the echoing side
    const int c = socket(unix_socket ? AF_UNIX : AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, addr, len) != 0) Fail("connect");
    if (!unix_socket) setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[kBytes] = {};
    for (int i = 0; i < kWarmup + trips; ++i) Exchange(c, buf, false);
    _exit(0);
  }
  pollfd waiting{listener, POLLIN, 0};
  if (poll(&waiting, 1, kConnectMs) != 1) {  // the child failed to connect
    waitpid(child, nullptr, 0);
    std::fprintf(stderr, "accept: no connection within %d s\n", kConnectMs / 1000);
    std::exit(1);
  }
  const int s = accept(listener, nullptr, nullptr);
  if (s < 0) Fail("accept");
  if (!unix_socket) setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char buf[kBytes] = {};
  for (int i = 0; i < kWarmup; ++i) Exchange(s, buf, true);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < trips; ++i) Exchange(s, buf, true);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  waitpid(child, nullptr, 0);
  close(s);
  close(listener);
  if (unix_socket) unlink(ua.sun_path);
  return us / trips;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const int trips = argc > 2 ? std::atoi(argv[2]) : 20000;
  if (rounds < 1 || rounds > 100 || trips < 1 || trips > 10000000) {
    std::fprintf(stderr, "usage: socket-pingpong-bench [ROUNDS 1-100] [TRIPS 1-1e7]\n");
    return 2;
  }
  char dir[] = "/tmp/attn-pingpong-XXXXXX";
  if (mkdtemp(dir) == nullptr) Fail("mkdtemp");
  for (int r = 0; r < rounds; ++r) {
    const double u = RoundTripUs(true, trips, dir), t = RoundTripUs(false, trips, dir);
    std::printf("{\"round\": %d, \"unix_us\": %.2f, \"tcp_us\": %.2f, \"unix_over_tcp\": %.3f}\n",
                r + 1, u, t, u / t);
  }
  rmdir(dir);
  return 0;
}
