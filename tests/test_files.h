// Files a server test needs: a temporary folder, the server's log captured,
// and a small PKI made with the openssl CLI at test time.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace attn_test {

// A folder under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/attn-ops-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(File(name)) << text;
  }

 private:
  std::string path_;
};

// What spdlog's default logger writes while it lives.
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~CapturedLog() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string Text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// A CA, a server certificate for 127.0.0.1/localhost, two client
// certificates (CN=attn-client, CN=team-b), and a second CA with its own
// client certificate: made once, by openssl.
class Pki {
 public:
  static const Pki& Get() {
    static const Pki* pki = new Pki();
    return *pki;
  }
  bool ok() const { return ok_; }
  std::string File(const std::string& name) const { return dir_.File(name); }

 private:
  Pki() {
    dir_.Write("server.ext",
               "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    dir_.Write("client.ext", "extendedKeyUsage=clientAuth\n");
    const std::string d = File("");
    auto ca = [&](const std::string& name) {
      return "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2"
             " -subj /CN=" +
             name + " -keyout " + d + name + ".key -out " + d + name +
             ".pem"
             " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign";
    };
    auto leaf = [&](const std::string& name, const std::string& cn, const std::string& ca_name,
                    const std::string& ext) {
      return "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" + cn +
             " -keyout " + d + name + ".key -out " + d + name + ".csr && " +
             "openssl x509 -req -days 2 -in " + d + name + ".csr -CA " + d + ca_name +
             ".pem -CAkey " + d + ca_name + ".key -CAcreateserial -extfile " + d + ext + " -out " +
             d + name + ".pem";
    };
    const std::string script = "set -e; exec >" + d + "openssl.log 2>&1; " + ca("ca") + "; " +
                               ca("other-ca") + "; " +
                               leaf("server", "localhost", "ca", "server.ext") + "; " +
                               leaf("client", "attn-client", "ca", "client.ext") + "; " +
                               leaf("client-b", "team-b", "ca", "client.ext") + "; " +
                               leaf("other-client", "intruder", "other-ca", "client.ext");
    ok_ = std::system(("bash -c '" + script + "'").c_str()) == 0;
  }
  TempDir dir_;
  bool ok_ = false;
};

}  // namespace attn_test
