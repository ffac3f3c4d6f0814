// The communication interface (dist/comm.h): the single-process Comm always,
// and world() under mpirun (CTest runs this binary with 2 and 3 ranks over
// loopback TCP: test_comm_mpi2, test_comm_mpi3). Expected values are MPI's
// definitions of each collective, computed per rank here.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "dist/comm.h"

namespace {

using kvad::dist::Comm;

// Under mpirun in a build without MPI every rank would be a world of one.
void skip_unless_world() {
  if (kvad::dist::launched_size() > 1 && !kvad::dist::mpi_built()) GTEST_SKIP() << "kvad built without MPI";
}

TEST(LocalComm, SelfMessagesAndCollectives) {
  auto c = kvad::dist::make_local_comm();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  const int a[3] = {1, 2, 3}, b[2] = {7, 8};
  c->send(a, sizeof a, 0, 5);
  c->send(b, sizeof b, 0, 6);
  int got_b[2] = {}, got_a[3] = {};
  c->recv(got_b, sizeof got_b, 0, 6);  // matched by tag, not by order of sending
  c->recv(got_a, sizeof got_a, 0, 5);
  EXPECT_EQ(got_a[2], 3);
  EXPECT_EQ(got_b[1], 8);
  float x[2] = {1.5f, -2};
  c->allreduce_sum(x, 2);
  EXPECT_EQ(x[1], -2);
  int g = 0;
  c->allgather(&a[1], sizeof(int), &g);
  EXPECT_EQ(g, 2);
  const kvad::dist::CommStats& s = c->stats();
  EXPECT_EQ(s.messages_sent, 4u);  // 2 sends, the all-reduce, the all-gather
  EXPECT_EQ(s.bytes_sent, sizeof a + sizeof b + sizeof x + sizeof(int));
  EXPECT_EQ(s.collectives, 2u);
}

TEST(LocalComm, BadCallsAreErrors) {
  auto c = kvad::dist::make_local_comm();
  int v = 0;
  EXPECT_THROW(c->recv(&v, sizeof v, 0, 1), kvad::Error);  // nothing sent: would wait forever
  EXPECT_THROW(c->send(&v, sizeof v, 1, 0), kvad::Error);  // no rank 1
  c->send(&v, sizeof v, 0, 2);
  char big[8];
  EXPECT_THROW(c->recv(big, sizeof big, 0, 2), kvad::Error);  // size differs
  EXPECT_THROW(c->bcast(&v, sizeof v, 3), kvad::Error);
}

TEST(World, Collectives) {
  skip_unless_world();
  Comm& w = kvad::dist::world();
  const int r = w.rank(), n = w.size();
  EXPECT_EQ(n, kvad::dist::launched_size());
  w.reset_stats();

  // all-reduce: element i of rank r is r + i / 4 (exact in f32); the sum is
  // n(n-1)/2 + n·i/4.
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r) + static_cast<float>(i) / 4;
  w.allreduce_sum(x.data(), x.size());
  for (size_t i = 0; i < x.size(); i += 97)
    EXPECT_EQ(x[i], static_cast<float>(n * (n - 1) / 2) + static_cast<float>(n) * static_cast<float>(i) / 4);

  // all-gather: two ints per rank, in rank order.
  const int mine[2] = {10 * r, 10 * r + 1};
  std::vector<int> all(2 * static_cast<size_t>(n));
  w.allgather(mine, sizeof mine, all.data());
  for (int q = 0; q < n; ++q) EXPECT_EQ(all[2 * q + 1], 10 * q + 1);

  // bcast from the last rank.
  int64_t v = r == n - 1 ? 123456789012 : 0;
  w.bcast(&v, sizeof v, n - 1);
  EXPECT_EQ(v, 123456789012);

  // send/recv round a ring, twice with different tags; received in tag order.
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  if (n > 1) {
    std::vector<int> out(300 + r, r), in(300 + prev, -1);
    const int small = 1000 + r;
    int small_in = -1;
    if (r % 2 == 0) {
      w.send(out.data(), out.size() * sizeof(int), next, 1);
      w.send(&small, sizeof small, next, 2);
      w.recv(in.data(), in.size() * sizeof(int), prev, 1);
      w.recv(&small_in, sizeof small_in, prev, 2);
    } else {
      w.recv(in.data(), in.size() * sizeof(int), prev, 1);
      w.recv(&small_in, sizeof small_in, prev, 2);
      w.send(out.data(), out.size() * sizeof(int), next, 1);
      w.send(&small, sizeof small, next, 2);
    }
    EXPECT_EQ(in.front(), prev);
    EXPECT_EQ(in.back(), prev);
    EXPECT_EQ(small_in, 1000 + prev);
  }

  // all-to-all-v: rank r sends d + 1 bytes of value 16·r + d to rank d.
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  for (int d = 0; d < n; ++d) sc[d] = static_cast<size_t>(d) + 1, rc[d] = static_cast<size_t>(r) + 1;
  std::partial_sum(sc.begin(), sc.end() - 1, sd.begin() + 1);
  std::partial_sum(rc.begin(), rc.end() - 1, rd.begin() + 1);
  std::vector<unsigned char> send(sd[n - 1] + sc[n - 1]), recv(rd[n - 1] + rc[n - 1], 0xff);
  for (int d = 0; d < n; ++d) std::memset(send.data() + sd[d], 16 * r + d, sc[d]);
  w.alltoallv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data());
  for (int s = 0; s < n; ++s)
    for (size_t k = 0; k < rc[s]; ++k) EXPECT_EQ(recv[rd[s] + k], 16 * s + r) << "from " << s;
  w.barrier();

  // The counters: what this rank handed over and took, call by call.
  const kvad::dist::CommStats& st = w.stats();
  const uint64_t p2p_out = n > 1 ? (300 + r) * sizeof(int) + sizeof(int) : 0;
  const uint64_t p2p_in = n > 1 ? (300 + prev) * sizeof(int) + sizeof(int) : 0;
  const uint64_t bc = sizeof v;
  EXPECT_EQ(st.bytes_sent, x.size() * 4 + sizeof mine + (r == n - 1 ? bc : 0) + p2p_out + send.size());
  EXPECT_EQ(st.bytes_received, x.size() * 4 + all.size() * 4 + (r == n - 1 ? 0 : bc) + p2p_in + recv.size());
  EXPECT_EQ(st.collectives, 5u);
  EXPECT_EQ(st.messages_sent, 3u + (r == n - 1 ? 1 : 0) + (n > 1 ? 2 : 0));
}

}  // namespace
