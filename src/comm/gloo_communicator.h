// The Gloo (CPU, TCP) backend of Communicator.
//
// Every process calls connect_gloo with the same store, size and prefix and its own rank; the
// call returns once the TCP connections its algorithms need are up (every pair of a small group,
// the ring and tree links of a large one: see full_mesh_max_size) or fails with kUnavailable
// after `timeout`. A new communicator (after a failure) uses a new prefix, so it never reads the
// rendezvous keys of an earlier one. subgroup() forms a group over the same connections
// (comm/pair_mesh.h): it connects only the pairs of its members that no group connected yet, so
// the TP, sync and DP groups of a small job add none.
//
// Every operation runs on Gloo's transport (unbound buffers over TCP) with ntp's own algorithms
// (comm/gloo_collectives.h), not Gloo's, so that abort() can wake every wait of the running
// operation at once.
//
// Error mapping (Gloo throws; this backend never lets an exception escape):
//   gloo::IoException for a closed/reset connection -> kUnavailable ("peer ... closed")
//   gloo::IoException for a timeout                  -> kUnavailable ("timed out ...")
//   abort(reason), before or during the operation    -> kUnavailable ("communicator aborted: "
//                                                       reason)
//   gloo::EnforceNotMet and anything else            -> kInternal
// A dead or hung peer is reported as kUnavailable in both cases because the remedy is the same:
// re-form the group. The timeout bounds each wait for the next message (lack of progress).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/store.h"
#include "core/status.h"

namespace ntp::comm {

struct GlooOptions {
  std::shared_ptr<Store> store;  // required
  int rank = 0;
  int size = 1;
  // Namespaces this communicator's rendezvous keys, e.g. "world/e0". Same on every rank.
  std::string prefix = "world";
  // Bound on connect and on every operation's lack of progress.
  std::chrono::milliseconds timeout{30000};
  // Address to listen on; peers connect to it. 127.0.0.1 on one machine.
  std::string hostname = "127.0.0.1";
  // When set, a rendezvous waiting for a peer's address ends (kUnavailable) within 5 ms of this
  // becoming true: a re-formation whose member died before it published cancels its connect
  // instead of waiting out `timeout`. Subgroups share it.
  std::shared_ptr<const std::atomic<bool>> cancel = nullptr;
  // Groups (this one and its subgroups) up to this size connect every pair of members and use
  // the direct algorithms; larger ones connect only their ring and tree links (and, on demand,
  // the peers an alltoallv, send/recv or broadcast from another root names) and take the tree
  // for small messages (comm/gloo_tree.h), so a member of a large group holds O(log n) pairs.
  int full_mesh_max_size = 32;
  // The subgroups this rank will form over this world, each as subgroup()'s `ranks` (world
  // ranks, strictly increasing, this rank among them). connect_gloo starts their links with the
  // world's, in one batch: a formation then publishes its addresses in one store write and reads
  // its peers' in one poll loop, where a group at a time took one of each per group (and the
  // groups' batches ran one after another). The subgroup() calls find their links started and
  // start nothing; a subgroup not named here starts its own batch. Subgroups do not inherit it.
  std::vector<std::vector<int>> planned_subgroups = {};
};

Result<std::unique_ptr<Communicator>> connect_gloo(const GlooOptions& options);

// The links (mesh ranks) that the member at `index` of a group over `members` (mesh ranks; empty:
// the group is the whole mesh of `size`) connects when the group forms: every other member of a
// group up to `full_mesh_max_size`, its ring and tree links (comm/gloo_tree.h) in a larger one.
std::vector<int> formation_links(const std::vector<int>& members, int index, int size,
                                 int full_mesh_max_size);

}  // namespace ntp::comm
