#include "dist/comm.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <vector>

namespace kvad::dist {

#ifdef KVAD_HAVE_MPI
std::unique_ptr<Comm> make_mpi_comm();  // mpi_comm.cpp
#endif

namespace {
constexpr size_t kMaxMessage = static_cast<size_t>(std::numeric_limits<int>::max());

void check_size(size_t bytes, const char* what) {
  if (bytes > kMaxMessage)
    throw Error(std::string("dist: ") + what + " of " + std::to_string(bytes) + " bytes is over the 2 GiB a message holds");
}
}  // namespace

void Comm::check_rank(int r, const char* what) const {
  if (r < 0 || r >= size())
    throw Error(std::string("dist: ") + what + " rank " + std::to_string(r) + " is not in [0, " +
                std::to_string(size()) + ")");
}

void Comm::send(const void* buf, size_t bytes, int dst, int tag) {
  check_rank(dst, "send to");
  check_size(bytes, "send");
  if (tag < 0) throw Error("dist: negative tag");
  do_send(buf, bytes, dst, tag);
  stats_.bytes_sent += bytes;
  ++stats_.messages_sent;
}

void Comm::recv(void* buf, size_t bytes, int src, int tag) {
  check_rank(src, "recv from");
  check_size(bytes, "recv");
  if (tag < 0) throw Error("dist: negative tag");
  do_recv(buf, bytes, src, tag);
  stats_.bytes_received += bytes;
  ++stats_.messages_received;
}

void Comm::allreduce_sum(float* buf, size_t n) {
  check_size(n * sizeof(float), "allreduce");
  do_allreduce_sum(buf, n);
  stats_.bytes_sent += n * sizeof(float);
  stats_.bytes_received += n * sizeof(float);
  ++stats_.messages_sent, ++stats_.messages_received, ++stats_.collectives;
}

void Comm::allgather(const void* send, size_t bytes, void* recv) {
  check_size(bytes * static_cast<size_t>(size()), "allgather");
  do_allgather(send, bytes, recv);
  stats_.bytes_sent += bytes;
  stats_.bytes_received += bytes * static_cast<size_t>(size());
  ++stats_.messages_sent, ++stats_.messages_received, ++stats_.collectives;
}

void Comm::alltoallv(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                     const size_t* recv_counts, const size_t* recv_displs) {
  size_t out = 0, in = 0;
  for (int r = 0; r < size(); ++r) {
    check_size(send_counts[r], "alltoallv part");
    check_size(recv_counts[r], "alltoallv part");
    check_size(send_displs[r] + send_counts[r], "alltoallv send buffer");
    check_size(recv_displs[r] + recv_counts[r], "alltoallv receive buffer");
    out += send_counts[r], in += recv_counts[r];
  }
  do_alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  stats_.bytes_sent += out;
  stats_.bytes_received += in;
  ++stats_.messages_sent, ++stats_.messages_received, ++stats_.collectives;
}

void Comm::bcast(void* buf, size_t bytes, int root) {
  check_rank(root, "bcast from");
  check_size(bytes, "bcast");
  do_bcast(buf, bytes, root);
  if (rank() == root) stats_.bytes_sent += bytes, ++stats_.messages_sent;
  else stats_.bytes_received += bytes, ++stats_.messages_received;
  ++stats_.collectives;
}

void Comm::barrier() {
  do_barrier();
  ++stats_.collectives;
}

namespace {

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* kind() const override { return "local"; }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 protected:
  void do_send(const void* buf, size_t bytes, int, int tag) override {
    const auto* p = static_cast<const char*>(buf);
    queue_.push_back({tag, std::vector<char>(p, p + bytes)});
  }
  void do_recv(void* buf, size_t bytes, int, int tag) override {
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->tag != tag) continue;
      if (it->data.size() != bytes)
        throw Error("dist: recv of " + std::to_string(bytes) + " bytes matched a message of " +
                    std::to_string(it->data.size()) + " (tag " + std::to_string(tag) + ")");
      if (bytes) std::memcpy(buf, it->data.data(), bytes);
      queue_.erase(it);
      return;
    }
    // One process: nothing else could ever send it.
    throw Error("dist: recv from rank 0 (tag " + std::to_string(tag) + ") with no message sent: it would wait forever");
  }
  void do_allreduce_sum(float*, size_t) override {}
  void do_allgather(const void* send, size_t bytes, void* recv) override {
    if (bytes && send != recv) std::memmove(recv, send, bytes);
  }
  void do_alltoallv(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs) override {
    if (send_counts[0] != recv_counts[0])
      throw Error("dist: alltoallv sends " + std::to_string(send_counts[0]) + " bytes to rank 0, which expects " +
                  std::to_string(recv_counts[0]));
    if (send_counts[0])
      std::memmove(static_cast<char*>(recv) + recv_displs[0], static_cast<const char*>(send) + send_displs[0],
                   send_counts[0]);
  }
  void do_bcast(void*, size_t, int) override {}
  void do_barrier() override {}

 private:
  struct Message {
    int tag;
    std::vector<char> data;
  };
  std::deque<Message> queue_;
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end && *end == '\0' && n >= 0 && n < (1 << 20) ? static_cast<int>(n) : -1;
}

std::mutex g_world_mu;
std::unique_ptr<Comm> g_world;

}  // namespace

std::unique_ptr<Comm> make_local_comm() { return std::make_unique<LocalComm>(); }

bool mpi_built() {
#ifdef KVAD_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int launched_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const int n = env_int(v);
    if (n > 0) return n;
  }
  return 1;
}

int world_rank_hint() {
  {
    std::lock_guard<std::mutex> lk(g_world_mu);
    if (g_world) return g_world->rank();
  }
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    const int r = env_int(v);
    if (r >= 0) return r;
  }
  return 0;
}

Comm& world() {
  std::lock_guard<std::mutex> lk(g_world_mu);
  if (!g_world) {
#ifdef KVAD_HAVE_MPI
    const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK") ||
                          std::getenv("PMIX_SIZE");
    g_world = launched ? make_mpi_comm() : make_local_comm();
#else
    g_world = make_local_comm();
#endif
  }
  return *g_world;
}

std::string no_mpi_message(int n) {
  return "distributed runs (" + std::to_string(n) +
         " ranks) need a kvad built with MPI: install Open MPI (Debian: openmpi-bin libopenmpi-dev; "
         "scripts/setup does) and configure the build again";
}

}  // namespace kvad::dist
