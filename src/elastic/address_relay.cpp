#include "elastic/address_relay.h"

#include <algorithm>

#include "comm/gloo_communicator.h"
#include "comm/pair_mesh.h"

namespace ntp::elastic {
namespace {

constexpr std::chrono::milliseconds kFirstPoll{1};
constexpr std::chrono::milliseconds kMaxPoll{100};

// Mesh ranks from..to-1 in order.
std::vector<int> rank_range(int from, int to) {
  std::vector<int> out;
  for (int r = from; r < to; ++r) out.push_back(r);
  return out;
}

}  // namespace

std::vector<int> dp_group_ranks(const MemberList& full, int slot, const GroupShape& shape) {
  std::vector<int> out;
  for (size_t r = 0; r < full.members.size(); ++r) {
    if (full.members[r] % shape.domain_size == slot) out.push_back(static_cast<int>(r));
  }
  return out;
}

std::vector<std::vector<int>> dp_groups(const MemberList& full, const GroupShape& shape) {
  std::vector<std::vector<int>> out(static_cast<size_t>(shape.domain_size));
  for (size_t r = 0; r < full.members.size(); ++r) {
    out[static_cast<size_t>(full.members[r] % shape.domain_size)].push_back(static_cast<int>(r));
  }
  return out;
}

RankLinks formation_links_of(const MemberList& full, int rank, const GroupShape& shape,
                             const std::vector<int>& dp) {
  const std::vector<int>& ids = full.members;
  const int size = static_cast<int>(ids.size());
  const int domain = ids[static_cast<size_t>(rank)] / shape.domain_size;
  std::vector<int> peers = comm::formation_links({}, rank, size, shape.full_mesh_max_size);
  // Its TP group is its domain: a run of the (increasing) list.
  const auto rank_of = [&ids](int id) {
    return static_cast<int>(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin());
  };
  const std::vector<int> tp =
      rank_range(rank_of(domain * shape.domain_size), rank_of((domain + 1) * shape.domain_size));
  for (const std::vector<int>* group : {&tp, &dp}) {
    const auto at = std::lower_bound(group->begin(), group->end(), rank);
    const int index = static_cast<int>(at - group->begin());
    const std::vector<int> more = comm::formation_links(
        *group, index, static_cast<int>(group->size()), shape.full_mesh_max_size);
    peers.insert(peers.end(), more.begin(), more.end());
  }
  RankLinks out;
  for (int peer : peers) {
    if (peer == rank) continue;
    const int peer_domain = ids[static_cast<size_t>(peer)] / shape.domain_size;
    (peer_domain == domain ? out.local : out.across).insert(peer);
  }
  return out;
}

RelayPlan plan_relay(const MemberList& full, int domain, const GroupShape& shape,
                     const std::string& mesh_prefix) {
  RelayPlan plan;
  std::set<int> domains;
  const std::vector<std::vector<int>> dp = dp_groups(full, shape);
  for (size_t r = 0; r < full.members.size(); ++r) {
    const int id = full.members[r];
    if (id / shape.domain_size != domain) continue;
    const int rank = static_cast<int>(r);
    const std::vector<int>& its_dp = dp[static_cast<size_t>(id % shape.domain_size)];
    for (int peer : formation_links_of(full, rank, shape, its_dp).across) {
      const int to = full.members[static_cast<size_t>(peer)] / shape.domain_size;
      plan.outgoing.push_back(comm::pair_address_key(mesh_prefix, rank, peer));
      plan.outgoing_domain.push_back(to);
      domains.insert(to);
    }
  }
  plan.peer_domains.assign(domains.begin(), domains.end());
  return plan;
}

std::string relay_batch_key(const std::string& global_group, int epoch, int from, int to) {
  return global_group + "/e" + std::to_string(epoch) + "/x/" + std::to_string(from) + "/" +
         std::to_string(to);
}

std::string encode_entries(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  for (const auto& [key, value] : entries) {
    for (const std::string* part : {&key, &value}) {
      out += std::to_string(part->size());
      out += ':';
      out += *part;
    }
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> decode_entries(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  auto part = [&text, &at](std::string& into) {
    const size_t colon = text.find(':', at);
    if (colon == std::string::npos || colon == at) return false;
    const std::string digits = text.substr(at, colon - at);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return false;
    }
    const size_t length = std::stoull(digits);
    if (length > text.size() - colon - 1) return false;
    into = text.substr(colon + 1, length);
    at = colon + 1 + length;
    return true;
  };
  while (at < text.size()) {
    std::pair<std::string, std::string> entry;
    if (!part(entry.first) || !part(entry.second)) {
      return invalid_argument("a relayed address batch is malformed at byte " + std::to_string(at) +
                              " of " + std::to_string(text.size()));
    }
    out.push_back(std::move(entry));
  }
  return out;
}

Task<Result<std::vector<std::string>>> collect_keys(IoSlot& io, std::vector<std::string> keys,
                                                    std::chrono::milliseconds timeout) {
  std::vector<std::string> values(keys.size());
  std::vector<size_t> missing(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) missing[i] = i;
  const Time deadline = io.now() + timeout;
  std::chrono::milliseconds pause = kFirstPoll;
  while (!missing.empty()) {
    io::GetMany ask;
    for (size_t i : missing) ask.keys.push_back(keys[i]);
    io::Op look = ask;
    io::Reply got = co_await io.perform(std::move(look));
    std::vector<size_t> still;
    for (size_t k = 0; k < missing.size(); ++k) {
      if (!got.status.ok() || !got.values[k]) {
        still.push_back(missing[k]);
        continue;
      }
      values[missing[k]] = *got.values[k];
    }
    missing = std::move(still);
    if (missing.empty()) break;
    if (io.now() >= deadline) {
      co_return deadline_exceeded("the address " + keys[missing.front()] +
                                  " was not published within " + std::to_string(timeout.count()) +
                                  " ms");
    }
    io::Op wait = io::Sleep{pause};
    io::Reply waited = co_await io.perform(std::move(wait));
    (void)waited;
    pause = std::min(2 * pause, kMaxPoll);
  }
  co_return values;
}

Task<Status> erase_keys(IoSlot& io, std::vector<std::string> keys) {
  if (keys.empty()) co_return Status();
  io::Op erase = io::Erase{std::move(keys)};
  io::Reply erased = co_await io.perform(std::move(erase));
  co_return erased.status;
}

std::vector<std::string> incoming_batch_keys(const std::string& global_group, int epoch, int domain,
                                             const RelayPlan& plan) {
  std::vector<std::string> keys;
  for (int d : plan.peer_domains) keys.push_back(relay_batch_key(global_group, epoch, d, domain));
  return keys;
}

Task<Result<std::vector<std::pair<std::string, std::string>>>> trade_batches(
    IoSlot& global_io, std::string global_group, int epoch, int domain, RelayPlan plan,
    std::vector<std::string> addresses, std::chrono::milliseconds timeout) {
  // The entries for each destination, keyed as its members read them: <prefix>/p/<from>/<to>
  // is the same key in every store.
  std::map<int, std::vector<std::pair<std::string, std::string>>> outgoing;
  for (size_t i = 0; i < plan.outgoing.size(); ++i) {
    outgoing[plan.outgoing_domain[i]].emplace_back(plan.outgoing[i], addresses[i]);
  }
  io::SetMany batches;
  for (int d : plan.peer_domains) {
    batches.entries.emplace_back(relay_batch_key(global_group, epoch, domain, d),
                                 encode_entries(outgoing[d]));
  }
  std::vector<std::string> theirs = incoming_batch_keys(global_group, epoch, domain, plan);
  io::Op publish = std::move(batches);
  io::Reply published = co_await global_io.perform(std::move(publish));
  if (!published.status.ok()) co_return published.status;
  Task<Result<std::vector<std::string>>> read = collect_keys(global_io, theirs, timeout);
  Result<std::vector<std::string>> incoming = co_await read;
  if (!incoming.ok()) co_return incoming.status();
  std::vector<std::pair<std::string, std::string>> entries;
  for (const std::string& batch : *incoming) {
    Result<std::vector<std::pair<std::string, std::string>>> decoded = decode_entries(batch);
    if (!decoded.ok()) co_return decoded.status();
    entries.insert(entries.end(), decoded->begin(), decoded->end());
  }
  co_return entries;
}

Task<Status> put_entries(IoSlot& domain_io,
                         std::vector<std::pair<std::string, std::string>> entries) {
  if (entries.empty()) co_return Status();
  io::Op write = io::SetMany{std::move(entries)};
  io::Reply written = co_await domain_io.perform(std::move(write));
  co_return written.status;
}

}  // namespace ntp::elastic
