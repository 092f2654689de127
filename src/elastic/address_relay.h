// The leaders' relay of link addresses across domains (docs/design/control-plane-hierarchy.md,
// "Formation"). With the hierarchy a member forms its groups over its domain's store only: it
// publishes the address of every link it sets up there, and reads its peers' there
// (comm/pair_mesh.h: key <mesh prefix>/p/<from>/<to>, in mesh ranks, each key read and erased by
// its one reader). A peer in another domain publishes on its own domain's store, so its domain's
// leader carries the address over: every leader
//   1. collects, on its domain's store, the addresses its members published for peers in other
//      domains (and erases them: it is their one reader);
//   2. on the global store, publishes them as one batch per destination domain, and reads the
//      batches the other leaders made for its domain (and erases them);
//   3. writes what it read into its domain's store, under the keys its members read.
// The links are symmetric (a group's members all name each other, comm/gloo_communicator.h), so
// the domains a leader sends to are those it receives from, and each batch is one key: the
// global store sees O(domain pairs with a link) keys per formation, not O(links).
//
// Each step is a machine (elastic/task.h) on one store; HierarchyMember chains them, so the
// runtime and the simulator run the same relay.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "elastic/member_list.h"
#include "elastic/task.h"

namespace ntp::elastic {

// The trainer's groups on a full list, as ntp's trainer builds them (train/job.cpp): the world
// over every listed GPU, per domain its TP group, per slot position its DP group (that slot in
// every listed domain).
struct GroupShape {
  int domain_size = 0;
  int full_mesh_max_size = 32;  // comm::GlooOptions'
};

// The mesh ranks (indices into full.members) of the DP group of slot position `slot` on `full`:
// that slot in every listed domain, increasing.
std::vector<int> dp_group_ranks(const MemberList& full, int slot, const GroupShape& shape);
// dp_group_ranks of every slot position, [slot], in one pass over the list.
std::vector<std::vector<int>> dp_groups(const MemberList& full, const GroupShape& shape);

// The mesh ranks that the GPU at mesh rank `rank` sets up links to when it forms its world, TP
// and DP groups (comm::formation_links of each), split by whether the peer is in its domain.
// `dp` is its DP group (dp_group_ranks: a caller that asks for many ranks computes each once).
struct RankLinks {
  std::set<int> local, across;
};
RankLinks formation_links_of(const MemberList& full, int rank, const GroupShape& shape,
                             const std::vector<int>& dp);

// What `domain`'s leader relays for the formation on `full`, its addresses keyed under
// `mesh_prefix` (the world communicator's prefix, comm::GlooOptions::prefix).
struct RelayPlan {
  // Step 1: domain store keys of its members' addresses for peers in other domains, and the
  // destination domain of each.
  std::vector<std::string> outgoing;
  std::vector<int> outgoing_domain;
  // The domains it trades batches with (those of its members' peers), increasing.
  std::vector<int> peer_domains;
};
RelayPlan plan_relay(const MemberList& full, int domain, const GroupShape& shape,
                     const std::string& mesh_prefix);

// The global store key of the batch `from` sends `to` in global epoch `epoch`'s formation.
std::string relay_batch_key(const std::string& global_group, int epoch, int from, int to);

// Entries as one value and back (length-prefixed: addresses are bytes).
std::string encode_entries(const std::vector<std::pair<std::string, std::string>>& entries);
Result<std::vector<std::pair<std::string, std::string>>> decode_entries(const std::string& text);

// Polls `keys` (from 1 ms, doubling to 100 ms, as comm::PairMesh does) until each was read;
// their values, in order. kDeadlineExceeded past `timeout`. It erases nothing: its caller, their
// one reader, erases them with erase_keys beside its next step, off the relay's path (an erase
// awaited after each poll cost the relay at 102,384 GPUs a queue wait on the global store per
// poll: control_plane_sim's formation 0.106 -> 0.138 s).
Task<Result<std::vector<std::string>>> collect_keys(IoSlot& io, std::vector<std::string> keys,
                                                    std::chrono::milliseconds timeout);
// Erases `keys`: best effort (a key left behind is garbage, read by no one).
Task<Status> erase_keys(IoSlot& io, std::vector<std::string> keys);

// The batch keys `domain` reads in step 2 (its caller erases them once read).
std::vector<std::string> incoming_batch_keys(const std::string& global_group, int epoch, int domain,
                                             const RelayPlan& plan);

// Step 2 for `plan` (with step 1's `addresses`, in plan.outgoing's order): the batches out, the
// batches in (not erased: incoming_batch_keys); the entries to write into the domain's store.
Task<Result<std::vector<std::pair<std::string, std::string>>>> trade_batches(
    IoSlot& global_io, std::string global_group, int epoch, int domain, RelayPlan plan,
    std::vector<std::string> addresses, std::chrono::milliseconds timeout);

// Step 3: `entries` into the domain's store.
Task<Status> put_entries(IoSlot& domain_io,
                         std::vector<std::pair<std::string, std::string>> entries);

}  // namespace ntp::elastic
