// libFuzzer target for the parsers of Hub answers (src/hub/client.h): the
// body of GET /api/models/{repo}/revision/{rev} (parse_repo_info) and the
// headers of HEAD /{repo}/resolve/{rev}/{file} (parse_file_metadata), plus the
// repo-spec and file-name validators they rely on.
//
// The input is split at its first NUL byte: the part before is tried as a
// revision-API body, as a repo spec and as a file name; the part after is
// read as "Name: value" header lines (and a leading status digit), the HEAD
// answer. kvad::Error is the expected outcome for bad input; a crash, a
// sanitizer report or another exception type is a bug. For an answer that
// parses, every file name must be a plain relative path (no "..", not
// absolute) and the commit 40 hex digits; an etag (a blob's file name) has
// no '/' and is not "." or "..".
//
// Run (asan preset): build-asan/fuzz/fuzz_hub_response -max_total_time=60 corpus/
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "hub/client.h"
#include "hub/http.h"
#include "hub/repo_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string body = in.substr(0, nul);
  const std::string head = nul == std::string::npos ? "" : in.substr(nul + 1);
  try {
    const kvad::hub::RepoInfo info = kvad::hub::parse_repo_info(body, "http://127.0.0.1/api", "fuzz");
    if (info.commit.size() != 40) std::abort();
    for (const std::string& f : info.files) {
      if (f.empty() || f[0] == '/') std::abort();
      size_t b = 0;  // no path component may be ".." (a name such as "a...b" is fine)
      while (b <= f.size()) {
        size_t e = f.find('/', b);
        if (e == std::string::npos) e = f.size();
        if (f.compare(b, e - b, "..") == 0) std::abort();
        b = e + 1;
      }
    }
  } catch (const kvad::Error&) {
  }
  try {
    (void)kvad::hub::parse_repo_spec(body);
  } catch (const kvad::Error&) {
  }
  try {
    kvad::hub::validate_repo_filename(body, "fuzz");
  } catch (const kvad::Error&) {
  }
  kvad::hub::HttpResponse r;
  r.status = head.empty() ? 200 : 200 + (static_cast<unsigned char>(head[0]) % 200);
  size_t pos = head.empty() ? 0 : 1;
  while (pos < head.size()) {
    size_t end = head.find('\n', pos);
    if (end == std::string::npos) end = head.size();
    const std::string line = head.substr(pos, end - pos);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      r.headers.emplace_back(name, line.substr(colon + 1));
    }
    pos = end + 1;
  }
  try {
    const kvad::hub::FileMetadata m = kvad::hub::parse_file_metadata(r, "http://127.0.0.1/resolve");
    if (m.etag.find('/') != std::string::npos || m.etag == ".." || m.etag == ".") std::abort();
  } catch (const kvad::Error&) {
  }
  return 0;
}
