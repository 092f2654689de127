// comm/pair_mesh.h's address exchange as the simulator models it: a member publishes one
// address per link in one batch, reads its peers' with polls from 1 ms doubling to 100 ms, and
// erases what it read. The links' set-up and the groups' barriers are charged by the caller.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "elastic/sim/sim_link.h"

namespace ntp::elastic::sim {

inline constexpr Duration kFirstAddressPoll = std::chrono::milliseconds(1);
inline constexpr Duration kMaxAddressPoll = std::chrono::milliseconds(100);

namespace detail {
inline void poll_addresses(StoreLink link, std::shared_ptr<std::vector<std::string>> missing,
                           Duration pause, std::shared_ptr<bool> live, std::function<void()> done) {
  if (missing->empty()) return done();
  link.send(
      io::GetMany{*missing},
      [link, missing, pause, live, done = std::move(done)](io::Reply r) mutable {
        if (!*live) return;
        std::vector<std::string> still, read;
        for (size_t k = 0; k < missing->size(); ++k) {
          (r.status.ok() && r.values[k] ? read : still).push_back((*missing)[k]);
        }
        if (!read.empty()) link.send(io::Erase{std::move(read)}, nullptr);
        *missing = std::move(still);
        const Duration wait = missing->empty() ? Duration(0) : pause;
        link.after(wait, [link, missing, pause, live, done = std::move(done)]() mutable {
          poll_addresses(link, missing, std::min<Duration>(2 * pause, kMaxAddressPoll), live,
                         std::move(done));
        });
      },
      nullptr);
}
}  // namespace detail

// Publishes `mine` (one key per link: this member's address for that peer), then polls the
// peers' `theirs` until every one was read; `done` runs then, unless `*live` turned false.
inline void exchange_addresses(StoreLink link,
                               std::vector<std::pair<std::string, std::string>> mine,
                               std::vector<std::string> theirs, std::shared_ptr<bool> live,
                               std::function<void()> done) {
  auto missing = std::make_shared<std::vector<std::string>>(std::move(theirs));
  link.send(
      io::SetMany{std::move(mine)},
      [link, missing, live, done = std::move(done)](io::Reply) mutable {
        if (*live) detail::poll_addresses(link, missing, kFirstAddressPoll, live, std::move(done));
      },
      nullptr);
}

}  // namespace ntp::elastic::sim
