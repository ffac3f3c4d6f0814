// Runs the real `kvad` binary through the shell, as a user would, and
// captures its exit status, stdout and stderr.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace kvad::test {

struct Out {
  int status = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// `kvad ARGS` with `input` on stdin. Capture files are unique per process
/// and call, so tests running at the same time never share them.
inline Out run_kvad(const std::string& args, const std::string& input = "") {
  static std::atomic<int> counter{0};
  const std::string base = ::testing::TempDir() + "/kvad_cli_" + std::to_string(getpid()) + "_" +
                           std::to_string(counter++);
  const std::string in = base + ".in", o = base + ".out", e = base + ".err";
  std::ofstream(in, std::ios::binary) << input;
  const std::string cmd = std::string(KVAD_BINARY) + " " + args + " <" + in + " >" + o + " 2>" + e;
  const int rc = std::system(cmd.c_str());
  Out r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = slurp(o);
  r.err = slurp(e);
  std::remove(in.c_str());
  std::remove(o.c_str());
  std::remove(e.c_str());
  return r;
}

/// stderr is exactly one line starting "kvad: error: ".
inline bool one_error_line(const std::string& err) {
  return err.rfind("kvad: error: ", 0) == 0 && err.find('\n') == err.size() - 1;
}

}  // namespace kvad::test
