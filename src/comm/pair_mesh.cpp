#include "comm/pair_mesh.h"

#include <gloo/transport/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace ntp::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Polls of the peers' addresses: from kFirstPoll doubling to kMaxPoll, so that a batch whose
// peers all publish within a few milliseconds (a formation right after an agreement) costs a
// handful of reads, and one waiting on a late peer reads every kMaxPoll: 10 reads/s per waiting
// member, about what its heartbeat and watch cost (docs/perf.md), not a busy loop.
constexpr std::chrono::microseconds kFirstPoll{1000};
constexpr std::chrono::microseconds kMaxPoll{100000};
// How often a waiting caller looks at its stop predicate.
constexpr std::chrono::milliseconds kStopPoll{5};

// Whether this end of a pair dials (the other listens): Gloo's rule in Pair::connect, the end
// with the greater address (IP, then port in network order) dials.
bool dials(const std::string& mine, const std::string& theirs) {
  const gloo::transport::tcp::Address a(std::vector<char>(mine.begin(), mine.end()));
  const gloo::transport::tcp::Address b(std::vector<char>(theirs.begin(), theirs.end()));
  const sockaddr_storage& sa = a.getSockaddr();
  const sockaddr_storage& sb = b.getSockaddr();
  int rv = 0;
  if (sa.ss_family == AF_INET && sb.ss_family == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(&sa);
    const auto* y = reinterpret_cast<const sockaddr_in*>(&sb);
    rv = std::memcmp(&x->sin_addr, &y->sin_addr, sizeof(in_addr));
    if (rv == 0) rv = x->sin_port - y->sin_port;
  } else if (sa.ss_family == AF_INET6 && sb.ss_family == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&sa);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&sb);
    rv = std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(in6_addr));
    if (rv == 0) rv = x->sin6_port - y->sin6_port;
  }
  return rv > 0;
}

}  // namespace

Result<std::shared_ptr<PairMesh>> PairMesh::create(const Options& options) {
  if (options.store == nullptr) return invalid_argument("PairMesh: no store given");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return invalid_argument("PairMesh: rank " + std::to_string(options.rank) + " is not in [0, " +
                            std::to_string(options.size) + ")");
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return unavailable("PairMesh (" + options.prefix + "): cannot listen on " + options.hostname +
                       ": " + e.what());
  }
  return std::shared_ptr<PairMesh>(new PairMesh(options, std::move(device)));
}

PairMesh::PairMesh(Options options, std::shared_ptr<gloo::transport::Device> device)
    : gloo::Context(options.rank, options.size),
      options_(std::move(options)),
      state_(static_cast<std::size_t>(options_.size), PairState::kNone),
      error_(static_cast<std::size_t>(options_.size)) {
  setTimeout(options_.timeout);
  device_ = std::move(device);
  transportContext_ = device_->createContext(rank, size);
  transportContext_->setTimeout(options_.timeout);
}

PairMesh::~PairMesh() = default;

std::string pair_address_key(const std::string& prefix, int from, int to) {
  return prefix + "/p/" + std::to_string(from) + "/" + std::to_string(to);
}

std::string PairMesh::address_key(int from, int to) const {
  return pair_address_key(options_.prefix, from, to);
}

Status PairMesh::claim_group(std::uint32_t id, const std::string& name) {
  std::lock_guard lock(mutex_);
  if (!groups_.insert(id).second) {
    return internal_error("group '" + name + "' (" + options_.prefix + ") has the id " +
                          std::to_string(id) +
                          " of another live group of this rank; give it another name");
  }
  return ok_status();
}

void PairMesh::release_group(std::uint32_t id) {
  std::lock_guard lock(mutex_);
  groups_.erase(id);
}

Status PairMesh::connect(const std::vector<int>& peers, const std::function<bool()>& stop) {
  NTP_RETURN_IF_ERROR(start(peers));
  return await(peers, stop);
}

Status PairMesh::start(const std::vector<int>& peers) {
  std::vector<int> mine;  // the pairs this call creates; the rest another call connects
  std::vector<std::pair<std::string, std::string>> published;
  {
    std::lock_guard lock(mutex_);
    for (int peer : peers) {
      if (peer < 0 || peer >= size || peer == rank) {
        return invalid_argument("PairMesh (" + options_.prefix + "): peer " + std::to_string(peer) +
                                " is not another rank of " + std::to_string(size));
      }
      PairState& state = state_[static_cast<std::size_t>(peer)];
      if (state != PairState::kNone) continue;
      try {
        std::unique_ptr<gloo::transport::Pair>& pair = transportContext_->createPair(peer);
        const std::vector<char> address = pair->address().bytes();
        published.emplace_back(address_key(rank, peer),
                               std::string(address.begin(), address.end()));
      } catch (const std::exception& e) {
        // The pairs this call already took would never be published: fail them, so that no
        // await() waits on them.
        const std::string why =
            "cannot create the pair to rank " + std::to_string(peer) + ": " + e.what();
        for (int taken : mine) {
          state_[static_cast<std::size_t>(taken)] = PairState::kFailed;
          error_[static_cast<std::size_t>(taken)] = why;
        }
        settled_.notify_all();
        return unavailable("PairMesh (" + options_.prefix + "): " + why);
      }
      state = PairState::kConnecting;
      mine.push_back(peer);
    }
  }
  if (!mine.empty()) {
    if (Status s = options_.store->set_many(published); !s.ok()) {
      for (int peer : mine) settle(peer, PairState::kFailed, s.to_string());
      return unavailable("PairMesh (" + options_.prefix + "): " + s.to_string());
    }
    // The waits and connects run on a thread of their own, so that `stop` can end this call
    // while a connect to a peer that died after publishing waits out its timeout.
    std::vector<std::string> own;
    own.reserve(published.size());
    for (const auto& entry : published) own.push_back(entry.second);
    std::thread([self = shared_from_this(), mine, own = std::move(own)] {
      self->finish_batch(mine, own);
    }).detach();
  }
  return ok_status();
}

Status PairMesh::await(const std::vector<int>& peers, const std::function<bool()>& stop) {
  std::unique_lock lock(mutex_);
  for (int peer : peers) {
    const auto p = static_cast<std::size_t>(peer);
    if (state_[p] == PairState::kNone) {
      return internal_error("PairMesh (" + options_.prefix + "): awaited rank " +
                            std::to_string(peer) + " was never started");
    }
    while (state_[p] == PairState::kConnecting) {
      if (stop && stop()) {
        return unavailable("PairMesh (" + options_.prefix + "): connect cancelled");
      }
      settled_.wait_for(lock, kStopPoll);
    }
    if (state_[p] == PairState::kFailed) {
      return unavailable("PairMesh (" + options_.prefix + "): rank " + std::to_string(rank) +
                         " cannot connect to rank " + std::to_string(peer) + ": " + error_[p]);
    }
  }
  return ok_status();
}

void PairMesh::finish_batch(const std::vector<int>& peers, const std::vector<std::string>& own) {
  // A dial completes once the peer's device accepts, whatever the peer's own thread is doing; a
  // listening end waits for its peer's dial. So each pair this end dials is dialled as soon as
  // the peer's address is read, and the listening ends are awaited last: no rank waits on a
  // rank that waits.
  std::vector<std::pair<int, std::string>> listening;  // (peer, its address)
  auto arrived = [&](std::size_t i, const std::string& theirs) {
    if (dials(own[i], theirs)) {
      connect_pair(peers[i], theirs);
    } else {
      listening.emplace_back(peers[i], theirs);
    }
  };
  if (Status s = exchange_addresses(peers, arrived); !s.ok()) {
    std::lock_guard lock(mutex_);
    for (int peer : peers) {
      if (state_[static_cast<std::size_t>(peer)] != PairState::kConnecting) continue;
      state_[static_cast<std::size_t>(peer)] = PairState::kFailed;
      error_[static_cast<std::size_t>(peer)] = s.message();
    }
    settled_.notify_all();
    return;
  }
  for (const auto& [peer, address] : listening) connect_pair(peer, address);
}

void PairMesh::connect_pair(int peer, const std::string& address) {
  try {
    std::unique_ptr<gloo::transport::Pair>& pair = transportContext_->getPair(peer);
    pair->connect(std::vector<char>(address.begin(), address.end()));
    settle(peer, PairState::kConnected, "");
  } catch (const std::exception& e) {
    settle(peer, PairState::kFailed, e.what());
  }
}

Status PairMesh::exchange_addresses(
    const std::vector<int>& peers,
    const std::function<void(std::size_t, const std::string&)>& arrived) {
  std::vector<std::string> keys;
  keys.reserve(peers.size());
  for (int peer : peers) keys.push_back(address_key(peer, rank));
  std::vector<std::size_t> missing(peers.size());
  for (std::size_t i = 0; i < peers.size(); ++i) missing[i] = i;
  const auto deadline = Clock::now() + options_.timeout;
  auto pause = kFirstPoll;
  while (!missing.empty()) {
    std::vector<std::string> ask;
    ask.reserve(missing.size());
    for (std::size_t i : missing) ask.push_back(keys[i]);
    NTP_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> got,
                         options_.store->get_many(ask));
    std::vector<std::size_t> still;
    std::vector<std::string> read;
    for (std::size_t k = 0; k < missing.size(); ++k) {
      if (!got[k]) {
        still.push_back(missing[k]);
        continue;
      }
      read.push_back(ask[k]);
      arrived(missing[k], *got[k]);
    }
    // This rank is the only reader of a key <prefix>/p/<peer>/<rank>: once read it is garbage
    // (best effort: a store that cannot erase, or an outage, leaves it).
    if (!read.empty()) (void)options_.store->erase(read);
    missing = std::move(still);
    if (missing.empty()) break;
    if (Clock::now() >= deadline) {
      return deadline_exceeded("rank " + std::to_string(peers[missing.front()]) +
                               " published no address within " +
                               std::to_string(options_.timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kMaxPoll);
  }
  return ok_status();
}

void PairMesh::settle(int peer, PairState state, const std::string& error) {
  std::lock_guard lock(mutex_);
  state_[static_cast<std::size_t>(peer)] = state;
  error_[static_cast<std::size_t>(peer)] = error;
  settled_.notify_all();
}

}  // namespace ntp::comm
