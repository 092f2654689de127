// One barrier of a formed group, message by message, as comm/gloo_collectives.cpp runs it: over
// a full mesh (n <= kFullMeshMaxSize) a dissemination, in whose round k every rank sends to
// rank + 2^k and waits for rank - 2^k's message, ceil(log2 n) rounds; over sparse links a
// binomial tree rooted at 0 (comm/gloo_tree.h), up and then down. So a rank that enters late
// holds every rank that waits on it, and each round's messages wake the ranks' threads together
// (on a shared host, one CPU queue): the two costs that a per-member count of rounds misses.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "comm/gloo_tree.h"
#include "core/non_copyable.h"

namespace ntp::elastic::sim {

class SimBarrier : NonCopyable {
 public:
  // Carries one message to rank `to`; `taken` runs when `to` has taken it in.
  using Deliver = std::function<void(int to, std::function<void()> taken)>;

  // `sparse`: the group's links are sparse (a tree); else a full mesh (a dissemination).
  SimBarrier(int n, bool sparse, Deliver deliver)
      : n_(n), sparse_(sparse), deliver_(std::move(deliver)), ranks_(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) at(r).tree = comm::gloo_ops::binomial_tree(r, n, 0);
    for (int bit = 1; bit < n; bit <<= 1) ++rounds_;
  }

  // Rank r enters the barrier; `done` runs once it leaves it.
  void enter(int r, std::function<void()> done) {
    Rank& rank = at(r);
    rank.entered = true;
    rank.done = std::move(done);
    if (n_ == 1) return leave(r);
    if (sparse_) return send_up_if_ready(r);
    send_round(r);
    advance(r);
  }

 private:
  struct Rank {
    comm::gloo_ops::TreeLinks tree;
    bool entered = false, left = false;
    std::function<void()> done;
    int round = 0;            // dissemination: the round it waits in
    std::uint64_t heard = 0;  // dissemination: the rounds whose message it took in
    size_t children_in = 0;   // tree: its children's messages taken in
    bool sent_up = false;     // tree
  };
  Rank& at(int r) { return ranks_[static_cast<size_t>(r)]; }

  void send_round(int r) {
    const int k = at(r).round;
    const int to = (r + (1 << k)) % n_;
    deliver_(to, [this, to, k] {
      at(to).heard |= std::uint64_t{1} << k;
      advance(to);
    });
  }
  void advance(int r) {
    Rank& rank = at(r);
    if (!rank.entered || rank.left) return;
    while (rank.round < rounds_ && (rank.heard >> rank.round & 1) != 0) {
      if (++rank.round < rounds_) send_round(r);
    }
    if (rank.round == rounds_) leave(r);
  }

  void send_up_if_ready(int r) {
    Rank& rank = at(r);
    if (!rank.entered || rank.sent_up || rank.children_in < rank.tree.children.size()) return;
    rank.sent_up = true;
    if (rank.tree.parent < 0) return send_down(r);  // the root heard from every rank
    const int parent = rank.tree.parent;
    deliver_(parent, [this, parent] {
      ++at(parent).children_in;
      send_up_if_ready(parent);
    });
  }
  void send_down(int r) {
    for (int child : at(r).tree.children) {
      deliver_(child, [this, child] { send_down(child); });
    }
    leave(r);
  }

  void leave(int r) {
    Rank& rank = at(r);
    rank.left = true;
    std::function<void()> done = std::move(rank.done);
    if (done) done();
  }

  int n_;
  bool sparse_;
  Deliver deliver_;
  int rounds_ = 0;
  std::vector<Rank> ranks_;
};

}  // namespace ntp::elastic::sim
