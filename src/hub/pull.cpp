#include "hub/pull.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "hub/sha256.h"

namespace fs = std::filesystem;

namespace kvad::hub {

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n < 1024) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else if (n < (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  else if (n < (1ull << 30)) std::snprintf(buf, sizeof buf, "%.1f MiB", n / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", n / 1073741824.0);
  return buf;
}

namespace {

// huggingface_hub _local_folder.CACHEDIR_TAG_CONTENT (bford.info/cachedir).
constexpr const char* kCachedirTag =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by huggingface_hub.\n"
    "# For information about cache directory tags, see:\n"
    "#\thttps://bford.info/cachedir/\n";

void make_dirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw Error("cannot create " + p.string() + ": " + ec.message());
}

// An exclusive flock(2) on .locks/<repo>/<etag>.lock, the file
// huggingface_hub's WeakFileLock (py-filelock, also flock) takes, so the two
// never write one blob at once. A filesystem without flock is not an error:
// the lock is a courtesy, correctness rests on .incomplete + rename.
class BlobLock {
 public:
  BlobLock(const fs::path& path, const std::string& file, PullObserver& obs) {
    make_dirs(path.parent_path());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
    if (fd_ < 0) return;
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (errno == EWOULDBLOCK) {
      obs.on_note("waiting for another process that is downloading " + file + " (" + path.string() + ")");
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~BlobLock() {
    if (fd_ >= 0) {
      ::flock(fd_, LOCK_UN);
      ::close(fd_);
    }
  }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};

void truncate_part(FILE* f, const fs::path& part) {
  if (std::fflush(f) != 0 || ::ftruncate(::fileno(f), 0) != 0)
    throw Error("cannot truncate " + part.string() + ": " + std::strerror(errno));
}

// Content-Range: bytes START-END/TOTAL -> START (or -1).
long long content_range_start(const std::string& v) {
  if (v.rfind("bytes ", 0) != 0) return -1;
  char* end = nullptr;
  const long long start = std::strtoll(v.c_str() + 6, &end, 10);
  return end && *end == '-' ? start : -1;
}

void check_disk_space(const fs::path& dir, uint64_t need) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;
  const uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (free < need)
    throw Error("not enough disk space in " + dir.string() + ": the download needs " + human_bytes(need) +
                ", there are " + human_bytes(free));
}

struct Download {
  HubClient& hub;
  const std::string& repo;
  const std::string& file;
  const FileMetadata& meta;
  PullObserver& obs;
};

// Fetches meta.location into blob + ".incomplete", resuming what a cut
// transfer left there, verifies it and renames it to `blob`. Returns the
// bytes that came over the network.
uint64_t download_blob(const Download& d, const fs::path& blob) {
  const HubOptions& opt = d.hub.options();
  const fs::path part = blob.string() + ".incomplete";
  const bool lfs = is_sha256_hex(d.meta.etag);
  const uint64_t total = d.meta.size.value_or(0);
  std::error_code ec;
  uint64_t have = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
  if (ec) have = 0;
  std::unique_ptr<FILE, FileCloser> f(std::fopen(part.c_str(), "ab"));
  if (!f) throw Error("cannot write " + part.string() + ": " + std::strerror(errno));
  if (d.meta.size && have > *d.meta.size) {
    truncate_part(f.get(), part);
    have = 0;
  }
  Sha256 hash;
  if (lfs && have > 0) sha256_update_from_file(hash, part.string(), have);
  if (d.meta.size) check_disk_space(blob.parent_path(), *d.meta.size - have);
  if (have > 0) d.obs.on_note("resuming " + d.file + " at " + human_bytes(have) + " (" + part.string() + ")");
  d.obs.on_start(d.file, have, total);

  uint64_t downloaded = 0;
  int attempt = 1;
  // One more try, or the error that says where the bytes so far are.
  auto retry = [&](const std::string& why) {
    if (attempt >= opt.max_attempts)
      throw Error("download of " + d.repo + "/" + d.file + " failed after " + std::to_string(attempt) +
                  " attempts (" + why + "): " + human_bytes(have) + " kept in " + part.string() +
                  "; run the pull again to resume");
    d.obs.on_note("download of " + d.file + " stopped at " + human_bytes(have) + " (" + why + "); resuming, attempt " +
                  std::to_string(attempt + 1) + " of " + std::to_string(opt.max_attempts));
    std::this_thread::sleep_for(std::chrono::milliseconds(250 * attempt));
    ++attempt;
  };
  auto restart = [&] {
    truncate_part(f.get(), part);
    have = 0;
    hash.reset();
  };
  while (!(d.meta.size && have == *d.meta.size)) {
    std::vector<std::string> extra;
    if (have > 0) extra.push_back("Range: bytes=" + std::to_string(have) + "-");
    HttpRequest base;
    base.connect_timeout_s = opt.download_timeout_s;
    base.stall_timeout_s = opt.download_timeout_s;
    bool started = false;
    base.on_body = [&](const HttpResponse& head, const char* data, size_t n) {
      if (!started) {
        started = true;
        if (head.status == 206) {
          const long long start = content_range_start(head.header("content-range"));
          if (start != static_cast<long long>(have))
            throw Error(d.file + ": asked to resume at byte " + std::to_string(have) + ", the server sent '" +
                        head.header("content-range") + "'");
        } else if (have > 0) {
          d.obs.on_note("the server ignored the Range request: downloading " + d.file + " from the start");
          restart();
        }
      }
      if (d.meta.size && have + n > *d.meta.size)
        throw Error(d.repo + "/" + d.file + ": the server sent more than the " + std::to_string(*d.meta.size) +
                    " bytes it announced");
      if (std::fwrite(data, 1, n, f.get()) != n)
        throw Error("cannot write " + part.string() + ": " + std::strerror(errno));
      if (lfs) hash.update(data, n);
      have += n;
      downloaded += n;
      d.obs.on_progress(d.file, have, total);
      return true;
    };
    HttpResponse r;
    try {
      r = d.hub.get(d.meta.location, extra, base);
    } catch (const TransportError& e) {
      if (std::fflush(f.get()) != 0) throw Error("cannot write " + part.string() + ": " + std::strerror(errno));
      retry(e.what());
      continue;
    }
    if (r.status == 416 && have > 0) {
      // Nothing past `have`: complete when the size is unknown, else the
      // partial blob is not a prefix of this file.
      if (!d.meta.size) break;
      restart();
      retry("the server refused the resume (HTTP 416)");
      continue;
    }
    if (r.status < 200 || r.status >= 300) {
      if (r.status == 429 || r.status >= 500) {
        retry("HTTP " + std::to_string(r.status));
        continue;
      }
      throw Error(d.hub.describe_failure(r, d.repo, d.repo + "/" + d.file));
    }
    if (!started && r.status == 200 && have > 0) restart();  // an empty file sent whole
    if (d.meta.size && have < *d.meta.size) {
      retry("the response ended early");
      continue;
    }
    break;
  }
  if (std::fflush(f.get()) != 0 || ::fsync(::fileno(f.get())) != 0)
    throw Error("cannot write " + part.string() + ": " + std::strerror(errno));
  f.reset();
  if (lfs) {
    const std::string got = hash.hex_digest();
    if (got != d.meta.etag) {
      fs::remove(part, ec);
      throw Error("sha256 of " + d.repo + "/" + d.file + " is " + got + ", the Hub says " + d.meta.etag +
                  ": refused (the download is removed, the snapshot is untouched)");
    }
  }
  fs::rename(part, blob, ec);
  if (ec) throw Error("cannot rename " + part.string() + " to " + blob.string() + ": " + ec.message());
  d.obs.on_done(d.file, downloaded, have);
  return downloaded;
}

// snapshots/<commit>/<file> -> ../../blobs/<etag> (one more ../ per folder
// in <file>), as huggingface_hub _create_symlink makes it.
void make_pointer(const fs::path& pointer, const fs::path& blob) {
  make_dirs(pointer.parent_path());
  const fs::path rel = blob.lexically_relative(pointer.parent_path());
  std::error_code ec;
  if (fs::is_symlink(pointer, ec)) {
    if (fs::read_symlink(pointer, ec) == rel && !ec) return;
    fs::remove(pointer, ec);
  } else if (fs::exists(pointer, ec)) {
    fs::remove(pointer, ec);
  }
  // Made under a temporary name and renamed over the pointer, so that two
  // pulls of the same repo at once both succeed (rename replaces atomically).
  const fs::path tmp = pointer.string() + ".kvad-link-" + std::to_string(::getpid());
  fs::remove(tmp, ec);
  fs::create_symlink(rel, tmp, ec);
  if (!ec) fs::rename(tmp, pointer, ec);
  if (ec) {
    fs::remove(tmp, ec);
    std::error_code ec2;
    if (fs::is_symlink(pointer, ec2) && fs::read_symlink(pointer, ec2) == rel) return;  // the other pull made it
    throw Error("cannot link " + pointer.string() + " -> " + rel.string() + ": " + ec.message());
  }
}

// refs/<revision> holds the commit with no newline (scan_cache_dir compares
// the raw contents), written to a temporary name and renamed.
void write_ref(const fs::path& ref, const std::string& commit) {
  std::error_code ec;
  if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref, std::ios::binary);
    std::string cur((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cur == commit) return;
  }
  make_dirs(ref.parent_path());
  const fs::path tmp = ref.string() + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out) throw Error("cannot write " + tmp.string());
  }
  fs::rename(tmp, ref, ec);
  if (ec) throw Error("cannot write " + ref.string() + ": " + ec.message());
}

void write_cachedir_tag(const fs::path& cache) {
  const fs::path tag = cache / "CACHEDIR.TAG";
  std::error_code ec;
  if (fs::exists(tag, ec)) return;
  std::ofstream out(tag, std::ios::binary);
  out << kCachedirTag;  // best effort, as in huggingface_hub
}

}  // namespace

PullResult pull(const RepoSpec& spec, const HubOptions& opt_in, PullObserver* observer) {
  PullObserver none;
  PullObserver& obs = observer ? *observer : none;
  validate_repo_id(spec.repo);
  validate_revision(spec.revision);
  HubOptions opt = opt_in;
  if (opt.cache_dir.empty()) opt.cache_dir = hf_hub_cache_dir();
  opt.cache_dir = fs::absolute(opt.cache_dir).lexically_normal().string();
  const fs::path repo_dir = repo_cache_dir(opt.cache_dir, spec.repo);
  PullResult res;

  if (opt.offline) {
    std::string why;
    std::optional<Resolved> r = resolve_hf(spec, opt.cache_dir, &why);
    if (!r) throw Error(spec.str() + " is not in the HF cache and HF_HUB_OFFLINE is set: " + why);
    res.resolved = *r;
    for (const std::string& f : r->selection.files) {
      std::error_code ec;
      const fs::path pointer = fs::path(r->snapshot_dir) / f;
      PulledFile p{f, fs::read_symlink(pointer, ec).filename().string(), fs::file_size(pointer, ec), 0};
      obs.on_cached(f, p.size);
      res.files.push_back(p);
    }
    return res;
  }

  HubClient hub(opt);
  const RepoInfo info = hub.repo_info(spec.repo, spec.revision);
  const Selection sel = select_model_files(info.files, spec.selector, spec.repo);
  obs.on_plan(spec.repo, info.commit, sel.files);
  const fs::path snapshot = repo_dir / "snapshots" / info.commit;
  const fs::path blobs = repo_dir / "blobs";
  const fs::path locks = fs::path(opt.cache_dir) / ".locks" / repo_folder_name(spec.repo);

  // 1. What is already there, and the metadata of what is not.
  std::vector<FileMetadata> metas(sel.files.size());
  std::vector<bool> linked(sel.files.size(), false);
  for (size_t k = 0; k < sel.files.size(); ++k) {
    const std::string& f = sel.files[k];
    const fs::path pointer = snapshot / f;
    std::error_code ec;
    PulledFile p{f, "", 0, 0};
    if (fs::is_regular_file(pointer, ec)) {
      linked[k] = true;
      p.etag = fs::read_symlink(pointer, ec).filename().string();
      p.size = fs::file_size(pointer, ec);
      obs.on_cached(f, p.size);
    } else {
      metas[k] = hub.file_metadata(spec.repo, info.commit, f);
      if (metas[k].commit != info.commit)
        throw Error(spec.repo + "/" + f + ": the server answered for commit " + metas[k].commit + ", not " +
                    info.commit);
      p.etag = metas[k].etag;
    }
    res.files.push_back(p);
  }

  // 2. The blobs. Nothing in snapshots/ changes until all are verified.
  for (size_t k = 0; k < sel.files.size(); ++k) {
    if (linked[k]) continue;
    make_dirs(blobs);
    make_dirs(repo_dir / "snapshots");  // a repo folder without it is "corrupted" to scan_cache_dir
    const fs::path blob = blobs / metas[k].etag;
    BlobLock lock(locks / (metas[k].etag + ".lock"), sel.files[k], obs);
    std::error_code ec;
    if (fs::is_regular_file(blob, ec)) {
      res.files[k].size = fs::file_size(blob, ec);
      obs.on_cached(sel.files[k], res.files[k].size);
      continue;
    }
    const uint64_t got = download_blob(Download{hub, spec.repo, sel.files[k], metas[k], obs}, blob);
    res.files[k].size = fs::file_size(blob, ec);
    res.files[k].downloaded = got;
    res.bytes_downloaded += got;
  }

  // 3. The snapshot, then the ref that points at it.
  for (size_t k = 0; k < sel.files.size(); ++k)
    if (!linked[k]) make_pointer(snapshot / sel.files[k], blobs / metas[k].etag);
  make_dirs(snapshot);  // a repo with nothing to fetch still gets its (empty) snapshot
  if (spec.revision != info.commit) write_ref(repo_dir / "refs" / spec.revision, info.commit);
  write_cachedir_tag(opt.cache_dir);

  res.resolved.commit = info.commit;
  res.resolved.snapshot_dir = snapshot.string();
  res.resolved.selection = sel;
  res.resolved.path = sel.kind == Selection::Kind::Checkpoint || sel.kind == Selection::Kind::Pipeline
                          ? snapshot.string()
                          : (snapshot / sel.entry).string();
  return res;
}

}  // namespace kvad::hub
