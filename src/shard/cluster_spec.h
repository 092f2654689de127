// ClusterSpec: the membership a plan is computed from, and its validation.
//
// The cluster has `domains` scale-up domains (NVLink racks) of `domain_size` device slots each; one
// data-parallel replica lives in each domain and runs tensor parallelism over the domain's healthy
// slots, so a domain with f failed slots runs at TP degree domain_size - f.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "shard/unit_space.h"

namespace ntp::shard {

// One device slot: local index `slot` of domain `domain`.
struct SlotRef {
  int domain = 0;
  int slot = 0;
  friend auto operator<=>(const SlotRef&, const SlotRef&) = default;
};

// Parses "d:l[,d:l...]" (e.g. "3:5,7:0"); an empty string is an empty list. Range checks happen in
// validate_cluster_spec, which knows the cluster size.
Result<std::vector<SlotRef>> parse_slot_list(std::string_view text, std::string_view flag);

struct ClusterSpec {
  int domains = 0;
  int domain_size = 0;            // slots per domain = the full TP degree
  int min_tp = 1;                 // no replica may run below this degree
  std::vector<SlotRef> failed;    // sorted, unique after validation
  std::vector<UnitSpace> spaces;  // what TP splits
  ByteCosts bytes;
  // Relative speed (throughput, > 0) of every slot: speeds[domain][slot]. Empty, or a domain's
  // list empty, means all equal; only the ratios among a domain's healthy slots matter. A domain
  // whose healthy slots differ in speed gets a speed-weighted layout (shard/weighted_layout.h).
  std::vector<std::vector<double>> speeds;
  // Measured load of every unit of a space (an expert's routed tokens): unit_loads[space][unit],
  // finite and >= 0; empty, or a space's list empty: none measured. A replica that runs below
  // the full degree or at weighted speeds deals such a space by load (shard/load_layout.h); a
  // healthy one keeps the balanced layout, so that a repair restores the healthy placement.
  std::vector<std::vector<double>> unit_loads;
  // Domains whose replica left the job (live recovery parks a replica that would run below
  // min_tp until its domain is repaired): sorted, unique; such a domain has no healthy slots,
  // TP degree 0, no units and no samples, whatever `failed` says of its slots. At least one
  // domain stays in.
  std::vector<int> left;

  // Healthy slots of `domain`, ascending (none for a domain that left).
  std::vector<int> healthy_slots(int domain) const;
  bool is_failed(SlotRef slot) const;
  // TP degree of the replica in `domain`: its number of healthy slots (0: it left).
  int degree(int domain) const;
  bool has_left(int domain) const;
  // Speed of slot `slot` of `domain`; 1.0 where no speeds are given.
  double speed(int domain, int slot) const;
  // True when the healthy slots of `domain` do not all have the same speed.
  bool weighted(int domain) const;
  // True when space `space` has measured unit loads.
  bool has_loads(int space) const;
};

// Adds to `left` every domain all of whose slots are in `failed` (sorted, unique): its replica left
// the job and the others take its samples. A live re-formation's rule for a domain without
// members (train/job.cpp's next_layout), so that `ntp train --failed` and `ntp plan --failed`
// can name every layout a live run reaches (a replay or a resume of one where a whole domain was
// lost), instead of rejecting a domain with no healthy slot. Slots out of range are not counted
// (validate_cluster_spec names them).
void leave_domains_without_slots(ClusterSpec& spec);

// Checks sizes, slot ranges, duplicates, the left domains, degrees against min_tp (a domain that
// left is exempt), that every space has at least
// as many units as the largest degree, and the speeds' shape and values (finite, > 0). Sorts
// `failed`. Errors name the bad value and the fix.
Status validate_cluster_spec(ClusterSpec& spec);

}  // namespace ntp::shard
