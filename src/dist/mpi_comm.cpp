// The Comm over MPI (Open MPI or MPICH): the only file in kvad that includes
// mpi.h. Bytes go as MPI_BYTE; the f32 sum as MPI_FLOAT/MPI_SUM.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dist/comm.h"

namespace kvad::dist {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("dist: ") + what + " failed: " + std::string(msg, static_cast<size_t>(len)));
}

std::vector<int> to_int(const size_t* v, int n) {
  std::vector<int> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<int>(v[i]);
  return out;
}

class MpiComm final : public Comm {
 public:
  MpiComm() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_ = true;
    }
    // Errors come back as codes (and become kvad::Error) instead of ending the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "mpi"; }
  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 protected:
  void do_send(const void* buf, size_t bytes, int dst, int tag) override {
    check(MPI_Send(buf, static_cast<int>(bytes), MPI_BYTE, dst, tag, MPI_COMM_WORLD), "MPI_Send");
  }
  void do_recv(void* buf, size_t bytes, int src, int tag) override {
    MPI_Status st;
    check(MPI_Recv(buf, static_cast<int>(bytes), MPI_BYTE, src, tag, MPI_COMM_WORLD, &st), "MPI_Recv");
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (static_cast<size_t>(got) != bytes)
      throw Error("dist: recv of " + std::to_string(bytes) + " bytes from rank " + std::to_string(src) + " got " +
                  std::to_string(got));
  }
  void do_allreduce_sum(float* buf, size_t n) override {
    check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }
  void do_allgather(const void* send, size_t bytes, void* recv) override {
    check(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes), MPI_BYTE,
                        MPI_COMM_WORLD),
          "MPI_Allgather");
  }
  void do_alltoallv(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs) override {
    const std::vector<int> sc = to_int(send_counts, size_), sd = to_int(send_displs, size_),
                           rc = to_int(recv_counts, size_), rd = to_int(recv_displs, size_);
    check(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Alltoallv");
  }
  void do_bcast(void* buf, size_t bytes, int root) override {
    check(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  void do_barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  int rank_ = 0, size_ = 1;
  bool owns_ = false;
};

}  // namespace

std::unique_ptr<Comm> make_mpi_comm() { return std::make_unique<MpiComm>(); }

}  // namespace kvad::dist
