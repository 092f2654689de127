#include "elastic/hierarchy_member.h"

#include <utility>
#include <vector>

#include "comm/exit_notice.h"

namespace ntp::elastic {

// What the member holds while it leads its domain.
struct HierarchyMember::Leadership {
  MemberList global;                    // the last global list this leader agreed
  bool domain_round_since_arm = false;  // its domain re-forms since `global` was armed
};

// A leader's round (a takeover's reading of the global list included): its own slots, so that
// a dropped round's last reply finds them.
struct HierarchyMember::Round {
  IoSlot global_io, domain_io;
  std::unique_ptr<DomainLeader> leader;
  std::shared_ptr<bool> live = std::make_shared<bool>(true);
  bool takeover = false;  // its slot took the lead for it (its leader died)
  bool relayed = false;   // its full list went to the domain
  int entered() const { return leader ? leader->entered() : -1; }
};

// One leader's relay of addresses for one full list: its plan, and a slot per step.
struct HierarchyMember::AddressRelay {
  std::shared_ptr<const MemberList> full;
  std::shared_ptr<bool> live;  // its round's: dropped when the domain re-forms again
  RelayPlan plan;
  IoSlot collect_io, trade_io, put_io;
  IoSlot erase_domain_io, erase_global_io;  // the keys it read, erased beside its next step
};

namespace {

// `task`, whose result goes to `done` as it ends: the driver runs a Task<Status> whatever the
// step's result.
template <typename T, typename Done>
Task<Status> handing(Task<T> task, Done done) {
  T result = co_await task;
  done(std::move(result));
  co_return Status();
}

}  // namespace

template <typename T, typename Done>
void HierarchyMember::run(StoreLevel level, IoSlot& io, std::shared_ptr<bool> live, Task<T> task,
                          Done done) {
  driver_.run(level, io, handing(std::move(task), std::move(done)), std::move(live));
}

HierarchyMember::HierarchyMember(HierarchyMemberParams params, HierarchyDriver& driver)
    : p_(std::move(params)),
      driver_(driver),
      agreement_(params_at(StoreLevel::kDomain), agree_io_),
      done_agreement_(params_at(StoreLevel::kDomain), done_io_) {
  if (p_.progress != nullptr) p_.progress->mark(Phase::kStep, 0);
  in_collectives(true);
  std::vector<int> slots(static_cast<size_t>(p_.domain_size));
  for (int s = 0; s < p_.domain_size; ++s) slots[static_cast<size_t>(s)] = s;
  domain_list_ = initial_list(slots, p_.domain_size);
}

HierarchyMember::~HierarchyMember() = default;

// The agreement's parameters at one level: the domain's (slot ids; exit notices of the
// domain's launcher, named by the list's restarts) or the leaders' (domain ids; none).
AgreementParams HierarchyMember::params_at(StoreLevel level) const {
  const bool domain = level == StoreLevel::kDomain;
  AgreementParams a;
  a.group = domain ? p_.domain_group : p_.global_group;
  a.me = domain ? p_.slot : p_.domain;
  a.progress = p_.progress;
  a.hang_detect = domain ? p_.hang_detect : p_.global_hang_detect;
  a.window = 10 * a.hang_detect;
  if (domain) {
    a.incarnation = [](int who, const MemberList& list) {
      return comm::incarnation(0, list.restarts[static_cast<size_t>(who)]);
    };
  }
  return a;
}

void HierarchyMember::start() {
  driver_.arm_watch(StoreLevel::kDomain, domain_list_);
  if (p_.slot != 0) return;
  std::vector<int> domains(static_cast<size_t>(p_.domain_count));
  for (int d = 0; d < p_.domain_count; ++d) domains[static_cast<size_t>(d)] = d;
  lead(initial_list(domains, p_.domain_count), false);
}

void HierarchyMember::lead(MemberList global, bool takeover) {
  lead_ = std::make_unique<Leadership>();
  lead_->global = std::move(global);
  lead_->domain_round_since_arm = takeover;  // a takeover's round is its domain's
  driver_.lead(lead_->global, takeover);
}

void HierarchyMember::domain_failed() {
  if (lead_) lead_->domain_round_since_arm = true;  // its failure is posted by this round
  driver_.defer([this] { reform_domain(); });
}

void HierarchyMember::report_failure() {
  if (!*running_ || agreeing_ || reported_epoch_ == domain_list_.epoch) return;
  reported_epoch_ = domain_list_.epoch;
  report_io_ = std::make_shared<IoSlot>();  // a slot per report: the last one's may be in flight
  run(StoreLevel::kDomain, *report_io_, running_,
      post_failure(*report_io_, p_.domain_group, domain_list_.epoch), [io = report_io_](Status) {});
}

void HierarchyMember::global_failed() {
  if (lead_->domain_round_since_arm) return;
  lead_->domain_round_since_arm = true;
  run(StoreLevel::kDomain, relay_io_, running_,
      post_failure(relay_io_, p_.domain_group, domain_list_.epoch), [](Status) {});
}

void HierarchyMember::reform_domain() {
  if (!*running_) return;
  driver_.reforming();
  awaiting_full_ = false;
  *await_live_ = false;  // a full list for the old domain list no longer fits
  trained_ = false;
  in_collectives(false);
  agreeing_ = true;
  run(StoreLevel::kDomain, agree_io_, running_, agreement_.report_failure(domain_list_.epoch),
      [this](Status) {
        driver_.disarm_watch(StoreLevel::kDomain);
        if (p_.progress != nullptr) p_.progress->mark(Phase::kReform, 0);
        *ready_live_ = false;  // a wait of an earlier re-formation's is superseded
        ready_live_ = std::make_shared<bool>(true);
        driver_.when_ready(ready_live_, [this] { agree_domain(); });
      });
}

void HierarchyMember::agree_domain() {
  run(StoreLevel::kDomain, agree_io_, running_,
      agreement_.agree(domain_list_, p_.announce ? p_.announce() : Announcement{0, 0}, false, {},
                       p_.encode_layout, {}),
      [this](Result<MemberList> list) {
        agreeing_ = false;
        if (!list.ok() && list.status().code() == StatusCode::kAborted) {
          driver_.leave();  // a list was agreed without it
          return;
        }
        if (!list.ok()) return fail(list.status());
        driver_.arm_watch(StoreLevel::kDomain, domain_list_);
        if (domain_list_.members.front() == p_.slot) lead_round();
        await_full();
      });
}

// This member leads its domain's list: it takes the lead if it did not hold it (its leader
// died), and starts a global round for the domain's new list, dropping one in flight.
void HierarchyMember::lead_round() {
  int in_flight = -1;
  if (round_) {
    *round_->live = false;
    in_flight = round_->entered();
  }
  auto round = std::make_shared<Round>();
  round_ = round;
  if (lead_) {
    run_round(std::move(round), in_flight);
    return;
  }
  take_over(std::move(round));
}

// A takeover: the global list this domain stood for is that of the last full list it got; the
// epochs its predecessor may have died in are given up before its round.
void HierarchyMember::take_over(std::shared_ptr<Round> round) {
  round->takeover = true;
  const int epoch = full_ ? full_->epoch : 0;
  run(StoreLevel::kGlobal, round->global_io, round->live,
      read_global_list(round->global_io, p_.global_group, epoch, p_.domain_count),
      [this, round](Result<MemberList> global) {
        if (!global.ok()) return fail(global.status());
        lead(std::move(*global), true);
        run(StoreLevel::kGlobal, round->global_io, round->live,
            fail_open_epochs(round->global_io, p_.global_group, lead_->global.epoch),
            [this, round](Status s) {
              if (!s.ok()) return fail(s);
              run_round(round, -1);
            });
      });
}

void HierarchyMember::run_round(std::shared_ptr<Round> round, int fail_in_flight) {
  driver_.disarm_watch(StoreLevel::kGlobal);
  round->leader =
      std::make_unique<DomainLeader>(DomainLeaderParams{p_.global_group, p_.domain, p_.domain_size,
                                                        p_.domain_count, p_.hang_detect, p_.decode},
                                     params_at(StoreLevel::kGlobal), round->global_io);
  run(StoreLevel::kGlobal, round->global_io, round->live,
      round->leader->round(lead_->global, domain_list_, fail_in_flight, p_.encode_layout),
      [this, round](Result<std::optional<FullList>> composed) {
        if (!composed.ok()) return fail(composed.status());
        if (!*composed) return lead_round();  // the global epoch failed first: a new round
        relay(round, std::move(**composed));
      });
}

// The round's end: the leaders' watch on the new global list, the full list handed to the
// domain, and the leader's part of the formation.
void HierarchyMember::relay(std::shared_ptr<Round> round, FullList composed) {
  round->relayed = true;
  lead_->domain_round_since_arm = false;
  driver_.arm_watch(StoreLevel::kGlobal, lead_->global);
  run(StoreLevel::kDomain, round->domain_io, round->live,
      relay_full(round->domain_io, p_.domain_group, composed.text, composed.list->epoch,
                 lead_->global.restarts[static_cast<size_t>(p_.domain)]),
      [this](Status s) {
        if (!s.ok()) fail(s);
      });
  driver_.relayed(composed.list, round->live);
  relay_addresses(round, composed.list);
}

void HierarchyMember::relay_addresses(std::shared_ptr<Round> round,
                                      std::shared_ptr<const MemberList> full) {
  if (!p_.mesh_prefix) return;
  auto relay = std::make_shared<AddressRelay>();
  relay->plan = plan_relay(*full, p_.domain, p_.shape, p_.mesh_prefix(*full));
  relay->full = std::move(full);
  relay->live = round->live;
  driver_.run(StoreLevel::kDomain, relay->collect_io, collect_outgoing(relay), relay->live);
}

// Step 1, on the domain's store: the members' addresses for peers in other domains.
Task<Status> HierarchyMember::collect_outgoing(std::shared_ptr<AddressRelay> relay) {
  Task<Result<std::vector<std::string>>> collect =
      collect_keys(relay->collect_io, relay->plan.outgoing, p_.relay_timeout);
  Result<std::vector<std::string>> addresses = co_await collect;
  if (!addresses.ok()) {
    relay_failed(addresses.status());
    co_return addresses.status();
  }
  driver_.run(StoreLevel::kGlobal, relay->trade_io, trade(relay, std::move(*addresses)),
              relay->live);
  driver_.run(StoreLevel::kDomain, relay->erase_domain_io,
              erasing(relay, relay->erase_domain_io, relay->plan.outgoing), relay->live);
  co_return Status();
}

// Step 2, on the global store: the batches out, and in.
Task<Status> HierarchyMember::trade(std::shared_ptr<AddressRelay> relay,
                                    std::vector<std::string> addresses) {
  Task<Result<std::vector<std::pair<std::string, std::string>>>> batches =
      trade_batches(relay->trade_io, p_.global_group, relay->full->epoch, p_.domain, relay->plan,
                    std::move(addresses), p_.relay_timeout);
  Result<std::vector<std::pair<std::string, std::string>>> incoming = co_await batches;
  if (!incoming.ok()) {
    relay_failed(incoming.status());
    co_return incoming.status();
  }
  driver_.run(StoreLevel::kDomain, relay->put_io, put(relay, std::move(*incoming)), relay->live);
  driver_.run(
      StoreLevel::kGlobal, relay->erase_global_io,
      erasing(relay, relay->erase_global_io,
              incoming_batch_keys(p_.global_group, relay->full->epoch, p_.domain, relay->plan)),
      relay->live);
  co_return Status();
}

// Step 3, on the domain's store: the incoming addresses where the members read them.
Task<Status> HierarchyMember::put(std::shared_ptr<AddressRelay> relay,
                                  std::vector<std::pair<std::string, std::string>> entries) {
  Task<Status> write = put_entries(relay->put_io, std::move(entries));
  Status written = co_await write;
  if (!written.ok()) relay_failed(written);
  co_return written;
}

// The keys a step read, erased (their one reader); its frame holds the relay, whose slot it uses.
Task<Status> HierarchyMember::erasing([[maybe_unused]] std::shared_ptr<AddressRelay> relay,
                                      IoSlot& io, std::vector<std::string> keys) {
  Task<Status> erase = erase_keys(io, std::move(keys));
  co_return co_await erase;  // best effort: a key left behind is garbage, read by no one
}

// Its members' formation then fails at its own timeout; the error says why.
void HierarchyMember::relay_failed(const Status& s) {
  fail(Status(s.code(), "the relay of addresses across domains: " + s.message()));
}

void HierarchyMember::await_full() {
  *await_live_ = false;
  await_live_ = std::make_shared<bool>(true);
  await_io_ = std::make_shared<IoSlot>();
  awaiting_full_ = true;
  run(StoreLevel::kDomain, *await_io_, await_live_,
      ntp::elastic::await_full(*await_io_, p_.domain_group, domain_list_.epoch, p_.decode),
      [this, io = await_io_](Result<std::shared_ptr<const MemberList>> got) {
        awaiting_full_ = false;
        if (!got.ok()) return fail(got.status());
        full_ = *got;
        driver_.got_full(full_, await_live_);
      });
}

void HierarchyMember::groups_formed() {
  run(StoreLevel::kDomain, done_io_, running_, done_agreement_.mark_done(domain_list_),
      [this](Status s) {
        if (!s.ok()) fail(s);
        if (lead_) return mark_global_done();
        resume_training();
      });
}

// Once every GPU of its domain is done on the full list, the leader marks the global epoch done
// for its domain, and only then trains: the first step on a global epoch needs every leader,
// so a step on it implies every domain marked it done, and the global decider's completeness
// (the next list's base, compose_full_list) never calls an epoch with updates on it incomplete.
void HierarchyMember::mark_global_done() {
  const std::shared_ptr<bool> live = await_live_;  // false once the domain re-forms again
  const int epoch = full_->epoch;
  run(StoreLevel::kDomain, done_io_, live, await_done(done_io_, p_.domain_group, domain_list_),
      [this, live, epoch](Status domain_done) {
        if (!domain_done.ok()) return fail(domain_done);
        run(StoreLevel::kGlobal, global_done_io_, live,
            mark_domain_done(global_done_io_, p_.global_group, epoch, p_.domain),
            [this](Status marked) {
              if (!marked.ok()) return fail(marked);
              resume_training();
            });
      });
}

void HierarchyMember::resume_training() {
  trained_ = true;
  if (p_.progress != nullptr) p_.progress->mark(Phase::kStep, 0);  // in its collectives
  in_collectives(true);
  driver_.training();
}

void HierarchyMember::stop() {
  *running_ = false;
  *await_live_ = false;
  *ready_live_ = false;
  if (round_) *round_->live = false;
}

bool HierarchyMember::taking_over() const {
  return round_ && *round_->live && round_->takeover && !round_->relayed;
}

std::string HierarchyMember::doing() const {
  std::vector<std::string> what;
  if (agreeing_) what.push_back("domain agreement");
  if (round_ && *round_->live && !round_->relayed) what.push_back("leaders' round");
  if (awaiting_full_) what.push_back("awaiting the full list");
  if (what.empty()) what.push_back(full_ && !trained_ ? "forming" : "steady");
  std::string out = what.front();
  for (size_t i = 1; i < what.size(); ++i) out += ", " + what[i];
  return out;
}

void HierarchyMember::fail(const Status& s) {
  if (error_.empty()) error_ = s.to_string();
}

// The runtime scopes its waits, so that a wait's start and end pair up: a re-formation that
// starts while the last one's formation is still under way (no collective entered) ends no wait.
void HierarchyMember::in_collectives(bool in) {
  if (in == in_collectives_) return;
  in_collectives_ = in;
  if (p_.progress != nullptr) p_.progress->waiting(in);
}

}  // namespace ntp::elastic
