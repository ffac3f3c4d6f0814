// The communication interface kvad's ranks use to split a model over several
// processes (DESIGN.md seam 13): point-to-point send/recv and the collectives
// all-reduce, all-gather, all-to-all and broadcast, over MPI (mpi_comm.cpp,
// the only file that includes mpi.h) or within one process (world size 1).
// Every call counts the bytes and messages it moves (CommStats), so the
// traffic of a split model is measured, not estimated.
//
// Semantics are MPI's (MPI 4.0 standard, chapters 3 and 6): calls block until
// this rank's part is done; collectives must be called by every rank of the
// communicator in the same order; send/recv match on (source, tag) in order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/error.h"

namespace kvad::dist {

/// What one rank moved through its Comm since it was made (or reset_stats):
/// bytes this rank handed to the library and took from it, and the number of
/// calls. send/recv count their payload; a collective counts, per rank, the
/// bytes of its send buffer as sent and of its receive buffer as received
/// (bcast: the root sends `bytes`, the others receive them), one message each.
struct CommStats {
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t messages_sent = 0, messages_received = 0;
  uint64_t collectives = 0;  ///< collective calls (barrier included)
};

/// A thrown error every rank already knows of (each rank found it on its
/// own, or rank 0 reported it to all): ranks other than 0 exit non-zero
/// without printing it again, rank 0 prints it.
class AgreedError : public Error {
 public:
  explicit AgreedError(const std::string& what) : Error(what) {}
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "local".
  virtual const char* kind() const = 0;

  /// Sends `bytes` bytes to rank `dst` under `tag` (>= 0); returns when the
  /// buffer may be reused. Throws kvad::Error for a rank out of range or a
  /// message over 2 GiB.
  void send(const void* buf, size_t bytes, int dst, int tag);
  /// Receives exactly `bytes` bytes sent by `src` under `tag`. Throws
  /// kvad::Error when the matching message has another size.
  void recv(void* buf, size_t bytes, int src, int tag);
  /// Element-wise sum of every rank's buf[0..n) (f32), left in every rank's buf.
  void allreduce_sum(float* buf, size_t n);
  /// Every rank's `bytes` bytes of `send`, in rank order, into each rank's
  /// `recv` [size() · bytes].
  void allgather(const void* send, size_t bytes, void* recv);
  /// Rank r's send[send_displs[d] .. + send_counts[d]) goes to rank d, which
  /// receives it at recv[recv_displs[r] .. + recv_counts[r]); counts and
  /// displacements in bytes, size() of each.
  void alltoallv(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                 const size_t* recv_counts, const size_t* recv_displs);
  /// Root's `bytes` bytes of buf into every rank's buf.
  void bcast(void* buf, size_t bytes, int root);
  void barrier();
  /// Ends every rank of the job with exit status `code` (MPI_Abort): for an
  /// error after which the other ranks would wait forever.
  [[noreturn]] virtual void abort(int code) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  virtual void do_send(const void* buf, size_t bytes, int dst, int tag) = 0;
  virtual void do_recv(void* buf, size_t bytes, int src, int tag) = 0;
  virtual void do_allreduce_sum(float* buf, size_t n) = 0;
  virtual void do_allgather(const void* send, size_t bytes, void* recv) = 0;
  virtual void do_alltoallv(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                            const size_t* recv_counts, const size_t* recv_displs) = 0;
  virtual void do_bcast(void* buf, size_t bytes, int root) = 0;
  virtual void do_barrier() = 0;

 private:
  void check_rank(int r, const char* what) const;
  CommStats stats_;
};

/// One process alone (world size 1): collectives copy, send to rank 0 queues
/// the message for a later recv from rank 0 (tag order kept).
std::unique_ptr<Comm> make_local_comm();

/// Whether this kvad was built with MPI.
bool mpi_built();
/// The world size the launcher asked for (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
/// PMIX's; 1 when not started by mpirun), whether or not kvad has MPI.
int launched_size();

/// This process's world: MPI's MPI_COMM_WORLD when kvad has MPI and was
/// started by a launcher (mpirun), else the local Comm of size 1. Made on
/// first use (MPI_Init_thread, MPI_THREAD_FUNNELED: only the thread that
/// calls it communicates); MPI is finalized at exit. Throws kvad::Error
/// when MPI fails to start.
Comm& world();

/// The rank of world() when it has been made or needs no MPI, else the
/// launcher's rank variable (0 outside mpirun); never starts MPI.
int world_rank_hint();

/// The message that turns a request for `n` ranks in a build without MPI
/// into an error ("distributed runs need a kvad built with MPI ...").
std::string no_mpi_message(int n);

}  // namespace kvad::dist
