#include "elastic/domain_leader.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "elastic/address_relay.h"
#include "elastic/agreement.h"
#include "elastic/agreement_machine.h"

namespace ntp::elastic {
namespace {

// A follower's read of the global events blocks at most this long before it looks again.
constexpr std::chrono::milliseconds kFollowerRead{250};

// Sorted ids as runs [first, last]: a full list of 100K GPUs less a few is a few runs.
nlohmann::json runs(const std::vector<int>& ids) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out.push_back({ids[i], ids[j]});
    i = j + 1;
  }
  return out;
}
std::vector<int> from_runs(const nlohmann::json& j) {
  std::vector<int> ids;
  for (const nlohmann::json& run : j) {
    for (int id = run.at(0).get<int>(); id <= run.at(1).get<int>(); ++id) ids.push_back(id);
  }
  return ids;
}
// restarts as {id: restart} for the nonzero ones.
nlohmann::json sparse(const std::vector<int>& values) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] != 0) out[std::to_string(i)] = values[i];
  }
  return out;
}

// A full list's own encoding: MemberList's fields, id lists as runs and restarts sparse.
std::string encode_full(const MemberList& l) {
  return nlohmann::json{{"epoch", l.epoch},           {"members", runs(l.members)},
                        {"holders", runs(l.holders)}, {"step", l.step},
                        {"base_epoch", l.base_epoch}, {"base_members", runs(l.base_members)},
                        {"slots", l.restarts.size()}, {"restarts", sparse(l.restarts)},
                        {"decider", l.decider},       {"parked", runs(l.parked)}}
      .dump();
}

Result<MemberList> decode_full(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    MemberList l;
    l.epoch = j.at("epoch").get<int>();
    l.members = from_runs(j.at("members"));
    l.holders = from_runs(j.at("holders"));
    l.step = j.at("step").get<std::int64_t>();
    l.base_epoch = j.at("base_epoch").get<int>();
    l.base_members = from_runs(j.at("base_members"));
    l.restarts.assign(j.at("slots").get<size_t>(), 0);
    for (const auto& [id, restart] : j.at("restarts").items()) {
      l.restarts.at(static_cast<size_t>(std::stoi(id))) = restart.get<int>();
    }
    l.decider = j.at("decider").get<int>();
    l.parked = from_runs(j.at("parked"));
    return l;
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("malformed full list: ") + e.what());
  }
}

}  // namespace

std::string domain_list_key(const std::string& global_group, int domain, int domain_epoch) {
  return global_group + "/domain/" + std::to_string(domain) + "/" + std::to_string(domain_epoch);
}
std::string full_list_key(const std::string& global_group, int global_epoch) {
  return global_group + "/full/" + std::to_string(global_epoch);
}
std::string relayed_full_key(const std::string& domain_group, int domain_epoch) {
  return domain_group + "/full/" + std::to_string(domain_epoch);
}

MemberList compose_full_list(const MemberList& global, const std::map<int, MemberList>& domains,
                             const std::vector<int>& base_gpus, int domain_size, int domain_count) {
  MemberList full;
  full.epoch = global.epoch;
  full.step = global.step;
  full.base_epoch = global.base_epoch;
  full.base_members = base_gpus;
  full.decider = global.decider;
  full.restarts.assign(static_cast<size_t>(domain_size) * static_cast<size_t>(domain_count), 0);
  for (int d : global.members) {
    const MemberList& domain = domains.at(d);
    for (int slot : domain.members) {
      const int id = d * domain_size + slot;
      full.members.push_back(id);
      if (std::binary_search(base_gpus.begin(), base_gpus.end(), id)) full.holders.push_back(id);
      full.restarts[static_cast<size_t>(id)] = domain.restarts[static_cast<size_t>(slot)];
    }
    for (int slot : domain.parked) full.parked.push_back(d * domain_size + slot);
  }
  return full;
}

std::vector<int> all_gpus(int domain_size, int domain_count) {
  std::vector<int> out(static_cast<size_t>(domain_size) * static_cast<size_t>(domain_count));
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int>(i);
  return out;
}

Task<Status> await_done(IoSlot& io, std::string group, MemberList list) {
  std::vector<std::string> keys;
  for (int id : list.members) keys.push_back(done_key(group, list.epoch, id));
  // No deadline of its own: a member that never marks is dropped by its domain's watch, and the
  // re-formation drops this wait (a day bounds it for collect_keys).
  Task<Result<std::vector<std::string>>> collect =
      collect_keys(io, std::move(keys), std::chrono::hours(24));
  Result<std::vector<std::string>> done = co_await collect;
  co_return done.status();
}

FullListDecoder plain_decoder() {
  return [](const std::string& text) -> Result<std::shared_ptr<const MemberList>> {
    Result<MemberList> list = decode_full(text);
    if (!list.ok()) return list.status();
    return std::shared_ptr<const MemberList>(std::make_shared<MemberList>(std::move(*list)));
  };
}

namespace {
// The global agreement's parameters, with on_enter recording the epoch into `entered`.
AgreementParams recording_entry(AgreementParams global, std::shared_ptr<int> entered) {
  global.on_enter = [entered, then = std::move(global.on_enter)](int epoch) {
    *entered = epoch;
    if (then) then(epoch);
  };
  return global;
}
}  // namespace

DomainLeader::DomainLeader(DomainLeaderParams params, AgreementParams global, IoSlot& global_io)
    : p_(std::move(params)),
      io_(global_io),
      agreement_(recording_entry(std::move(global), entered_), global_io) {}

Task<Status> DomainLeader::publish_domain(const MemberList& domain_list) {
  io::Op publish =
      io::set(domain_list_key(p_.global_group, p_.domain, domain_list.epoch), encode(domain_list));
  io::Reply published = co_await io_.perform(std::move(publish));
  co_return published.status;
}

Result<FullList> DomainLeader::decoded(std::string text) const {
  Result<std::shared_ptr<const MemberList>> list = p_.decode(text);
  if (!list.ok()) return list.status();
  return FullList{std::move(text), std::move(*list)};
}

Task<Status> mark_domain_done(IoSlot& global_io, std::string global_group, int epoch, int domain) {
  io::Op mark = io::set(done_key(global_group, epoch, domain), "1");
  io::Reply marked = co_await global_io.perform(std::move(mark));
  co_return marked.status;
}

// The domain lists `global` names and its base epoch's full list, in one read.
Task<Result<FullList>> DomainLeader::compose(const MemberList& global) {
  io::GetMany ask;
  for (int d : global.members) {
    ask.keys.push_back(
        domain_list_key(p_.global_group, d, global.restarts[static_cast<size_t>(d)]));
  }
  const bool read_base = global.base_epoch > 0;  // epoch 0's is every GPU
  if (read_base) ask.keys.push_back(full_list_key(p_.global_group, global.base_epoch));
  io::Op read = std::move(ask);
  io::Reply lists = co_await io_.perform(std::move(read));
  if (!lists.status.ok()) co_return lists.status;
  std::map<int, MemberList> domains;
  for (size_t i = 0; i < global.members.size(); ++i) {
    const int d = global.members[i];
    if (!lists.values[i]) {
      co_return Status(StatusCode::kInternal,
                       "domain " + std::to_string(d) + " announced a list it did not publish");
    }
    NTP_CO_ASSIGN_OR_RETURN(domains[d], decode_member_list(*lists.values[i]));
  }
  std::vector<int> base_gpus;
  if (!read_base) {
    base_gpus = all_gpus(p_.domain_size, p_.domain_count);
  } else if (!lists.values.back()) {
    co_return Status(StatusCode::kInternal, "the full list of base epoch " +
                                                std::to_string(global.base_epoch) + " is gone");
  } else {
    NTP_CO_ASSIGN_OR_RETURN(std::shared_ptr<const MemberList> base,
                            p_.decode(*lists.values.back()));
    base_gpus = base->members;
  }
  const std::string text =
      encode_full(compose_full_list(global, domains, base_gpus, p_.domain_size, p_.domain_count));
  io::Op publish = io::set(full_list_key(p_.global_group, global.epoch), text);
  io::Reply published = co_await io_.perform(std::move(publish));
  if (!published.status.ok()) co_return published.status;
  io::Op event = io::Append{job_events(p_.global_group), "full " + std::to_string(global.epoch)};
  const io::Reply announced = co_await io_.perform(std::move(event));
  (void)announced;  // best effort: followers also look at the key
  co_return decoded(text);
}

Task<Result<std::optional<FullList>>> DomainLeader::full_list(const MemberList& global) {
  if (global.decider == p_.domain) {
    NTP_CO_ASSIGN_OR_RETURN(FullList composed, co_await compose(global));
    co_return std::optional<FullList>(std::move(composed));
  }
  const Time start = io_.now();
  std::vector<comm::StreamCursor> events{{job_events(p_.global_group), ""}};
  for (;;) {
    io::Op look = io::get(full_list_key(p_.global_group, global.epoch),
                          fail_key(p_.global_group, global.epoch));
    io::Reply seen = co_await io_.perform(std::move(look));
    if (seen.status.ok() && seen.values[0]) {
      NTP_CO_ASSIGN_OR_RETURN(FullList read, decoded(*seen.values[0]));
      co_return std::optional<FullList>(std::move(read));
    }
    if (seen.status.ok() && seen.values[1]) co_return std::optional<FullList>();  // failed
    if (io_.now() - start >= p_.compose_wait) {
      NTP_CO_ASSIGN_OR_RETURN(FullList composed, co_await compose(global));
      co_return std::optional<FullList>(std::move(composed));
    }
    io::Op read = io::ReadStreams{events, kFollowerRead};
    io::Reply news = co_await io_.perform(std::move(read));
    if (news.status.ok()) events = std::move(news.cursors);
  }
}

Task<Result<std::optional<FullList>>> DomainLeader::round(
    MemberList& global, MemberList domain_list, int fail_in_flight,
    std::function<std::string()> encode_layout) {
  const Status published = co_await publish_domain(domain_list);
  NTP_CO_RETURN_IF_ERROR(published);
  // Best effort: a failure notice that does not go out is found by the others' own watches.
  const Status armed_failed = co_await post_failure(io_, p_.global_group, global.epoch);
  (void)armed_failed;
  if (fail_in_flight > global.epoch) {
    const Status dropped_failed = co_await post_failure(io_, p_.global_group, fail_in_flight);
    (void)dropped_failed;
  }
  for (;;) {
    NTP_CO_ASSIGN_OR_RETURN(
        MemberList agreed,
        co_await agreement_.agree(global, Announcement{domain_list.step, domain_list.epoch}, false,
                                  {}, encode_layout, {}));
    (void)agreed;  // agree() left it in `global` too
    if (global.restarts[static_cast<size_t>(p_.domain)] == domain_list.epoch) break;
    // Agreed on this domain's older list: a replaced leader that woke announced it late
    // (models/hierarchy/hierarchy.pml, TAKE_ANY_LIST). Its full list names a domain list no
    // member of this one takes, so the epoch is failed and the next one agreed.
    const Status failed = co_await post_failure(io_, p_.global_group, global.epoch);
    NTP_CO_RETURN_IF_ERROR(failed);
  }
  Result<std::optional<FullList>> full = co_await full_list(global);
  co_return full;
}

Task<Result<MemberList>> read_global_list(IoSlot& io, std::string global_group, int epoch,
                                          int domain_count) {
  if (epoch == 0) {
    std::vector<int> domains(static_cast<size_t>(domain_count));
    for (int d = 0; d < domain_count; ++d) domains[static_cast<size_t>(d)] = d;
    co_return initial_list(domains, domain_count);
  }
  io::Op ask = io::get(epoch_key(global_group, epoch, "list"));
  io::Reply text = co_await io.perform(std::move(ask));
  if (!text.status.ok()) co_return text.status;
  if (!text.values[0] || decode_tombstone(*text.values[0])) {
    co_return Status(StatusCode::kNotFound,
                     "global list of epoch " + std::to_string(epoch) + " is gone");
  }
  Result<MemberList> list = decode_member_list(*text.values[0]);
  co_return list;
}

Task<Status> fail_open_epochs(IoSlot& io, std::string global_group, int after_epoch) {
  constexpr int kMaxEpochs = 32;  // as the agreement's own bound
  io::Op count = io::Add{fail_key(global_group, after_epoch), 1};
  io::Reply counted = co_await io.perform(std::move(count));
  if (!counted.status.ok()) co_return counted.status;
  io::Op event = io::Append{job_events(global_group), "fail " + std::to_string(after_epoch)};
  io::Reply announced = co_await io.perform(std::move(event));  // again, if it went out once
  if (!announced.status.ok()) co_return announced.status;
  for (int epoch = after_epoch + 1; epoch <= after_epoch + kMaxEpochs; ++epoch) {
    io::Op look = io::get(fail_key(global_group, epoch), epoch_key(global_group, epoch, "list"));
    io::Reply seen = co_await io.perform(std::move(look));
    if (!seen.status.ok()) co_return seen.status;
    if (seen.values[0]) continue;  // failed already
    Status failed = co_await post_failure(io, global_group, epoch);
    if (!failed.ok() || !seen.values[1]) co_return failed;  // the open epoch: done
  }
  co_return unavailable("no open global epoch within " + std::to_string(kMaxEpochs));
}

Task<Status> relay_full(IoSlot& domain_io, std::string domain_group, std::string full_text,
                        int global_epoch, int domain_epoch) {
  io::Op relay = io::set(relayed_full_key(domain_group, domain_epoch), std::move(full_text));
  io::Reply relayed = co_await domain_io.perform(std::move(relay));
  if (!relayed.status.ok()) co_return relayed.status;
  io::Op event = io::Append{job_events(domain_group), "full " + std::to_string(global_epoch)};
  io::Reply announced = co_await domain_io.perform(std::move(event));
  co_return announced.status;
}

Task<Result<std::shared_ptr<const MemberList>>> await_full(IoSlot& domain_io,
                                                           std::string domain_group,
                                                           int domain_epoch,
                                                           FullListDecoder decode) {
  std::vector<comm::StreamCursor> events{{job_events(domain_group), ""}};
  for (;;) {
    io::Op look = io::get(relayed_full_key(domain_group, domain_epoch));
    io::Reply seen = co_await domain_io.perform(std::move(look));
    if (seen.status.ok() && seen.values[0]) {
      Result<std::shared_ptr<const MemberList>> full = decode(*seen.values[0]);
      co_return full;
    }
    io::Op read = io::ReadStreams{events, kFollowerRead};
    io::Reply news = co_await domain_io.perform(std::move(read));
    if (news.status.ok()) events = std::move(news.cursors);
  }
}

}  // namespace ntp::elastic
