#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"

TEST(ThreadPool, EveryThreadRunsOnce) {
  for (int n : {1, 2, 3, 5}) {
    kvad::ThreadPool pool(n);
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> hits(n);
      pool.run([&](int ith, int nth) {
        EXPECT_EQ(nth, n);
        hits[ith].fetch_add(1);
      });
      for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1);
    }
  }
}

TEST(ThreadPool, ParallelForCoversRangeOnce) {
  kvad::ThreadPool pool(3);
  std::vector<std::atomic<int>> seen(1001);
  pool.parallel_for(1001, 7, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
  });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

TEST(ThreadPool, ExceptionPropagatesAndPoolStaysUsable) {
  kvad::ThreadPool pool(2);
  EXPECT_THROW(pool.run([](int ith, int) {
    if (ith == 1) throw kvad::Error("boom");
  }), kvad::Error);
  std::atomic<int> n{0};
  pool.run([&](int, int) { n++; });
  EXPECT_EQ(n.load(), 2);
}
