#include "launch/identity.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

namespace ntp::launch {
namespace {

EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(IdentityTest, FlagsWinOverSchedulerVariables) {
  Result<NodeIdentity> id =
      resolve_node_identity(4, 2, fake_env({{"SLURM_NODEID", "1"}, {"SLURM_NNODES", "3"}}));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->nnodes, 4);
  EXPECT_EQ(id->node_rank, 2);
  EXPECT_EQ(id->source, "flags");
}

TEST(IdentityTest, SlurmThenOpenMpiThenDefault) {
  Result<NodeIdentity> slurm = resolve_node_identity(
      std::nullopt, std::nullopt, fake_env({{"SLURM_NODEID", "2"}, {"SLURM_JOB_NUM_NODES", "5"}}));
  ASSERT_TRUE(slurm.ok());
  EXPECT_EQ(slurm->nnodes, 5);
  EXPECT_EQ(slurm->node_rank, 2);
  EXPECT_EQ(slurm->source, "slurm");

  Result<NodeIdentity> ompi = resolve_node_identity(
      std::nullopt, std::nullopt,
      fake_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(ompi.ok());
  EXPECT_EQ(ompi->nnodes, 2);
  EXPECT_EQ(ompi->node_rank, 1);
  EXPECT_EQ(ompi->source, "openmpi");

  Result<NodeIdentity> none = resolve_node_identity(std::nullopt, std::nullopt, fake_env({}));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->nnodes, 1);
  EXPECT_EQ(none->node_rank, 0);
}

TEST(IdentityTest, RejectsANodeRankOutsideTheNodes) {
  Result<NodeIdentity> id = resolve_node_identity(2, 2, fake_env({}));
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  Result<NodeIdentity> slurm = resolve_node_identity(
      std::nullopt, std::nullopt, fake_env({{"SLURM_NODEID", "3"}, {"SLURM_NNODES", "3"}}));
  EXPECT_EQ(slurm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(slurm.status().message().find("slurm"), std::string::npos);
}

// The environment `ntp launch` gives the worker `id`, as a map.
std::map<std::string, std::string> env_of(const WorkerIdentity& id) {
  std::map<std::string, std::string> vars;
  for (const std::string& entry : worker_env_entries(id)) {
    const auto eq = entry.find('=');
    vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return vars;
}

// `vars` with each of `bad` (a variable, its value) is an error that names the variable.
void expect_rejected(const std::map<std::string, std::string>& vars,
                     const std::vector<std::pair<std::string, std::string>>& bad) {
  for (const auto& [name, value] : bad) {
    std::map<std::string, std::string> with = vars;
    with[name] = value;
    Result<WorkerIdentity> parsed = worker_identity_from_env(fake_env(with));
    EXPECT_EQ(parsed.status().code(), StatusCode::kFailedPrecondition) << name << "=" << value;
    EXPECT_NE(parsed.status().message().find(name), std::string::npos) << name << "=" << value;
  }
}

TEST(IdentityTest, DomainStoreSpecsAndNamespaces) {
  EXPECT_EQ(domain_store_spec("file:/x/{domain}", 3), "file:/x/3");
  EXPECT_EQ(domain_store_spec("redis://r{domain}:6379/{domain}", 12), "redis://r12:6379/12");
  EXPECT_EQ(domain_store_spec("redis://shared:6379", 5), "redis://shared:6379");
  EXPECT_EQ(domain_namespace("run-1", 2), "run-1.domain2");
  WorkerIdentity none;
  EXPECT_EQ(open_domain_store(none).status().code(), StatusCode::kFailedPrecondition);
}

TEST(IdentityTest, WorkerEnvironmentRoundTrips) {
  WorkerIdentity id;
  id.rank = 5;
  id.world_size = 8;
  id.local_rank = 1;
  id.local_world_size = 4;
  id.node_rank = 1;
  id.nnodes = 2;
  id.store = "file:/tmp/x";
  id.run_id = "job-1";
  id.restart_count = 2;
  id.attempt = 3;
  id.lost_ranks = {0, 6};
  std::map<std::string, std::string> vars = env_of(id);
  EXPECT_EQ(vars.size(), 11U);
  EXPECT_EQ(vars["NTP_LOST_RANKS"], "0,6");
  Result<WorkerIdentity> back = worker_identity_from_env(fake_env(vars));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->rank, 5);
  EXPECT_EQ(back->world_size, 8);
  EXPECT_EQ(back->local_rank, 1);
  EXPECT_EQ(back->local_world_size, 4);
  EXPECT_EQ(back->node_rank, 1);
  EXPECT_EQ(back->nnodes, 2);
  EXPECT_EQ(back->store, "file:/tmp/x");
  EXPECT_EQ(back->run_id, "job-1");
  EXPECT_EQ(back->restart_count, 2);
  EXPECT_EQ(back->attempt, 3);
  EXPECT_EQ(back->lost_ranks, (std::vector<int>{0, 6}));

  // Older launchers set neither NTP_ATTEMPT nor NTP_LOST_RANKS: attempt 0, nothing lost.
  std::map<std::string, std::string> old_vars = vars;
  old_vars.erase("NTP_ATTEMPT");
  old_vars.erase("NTP_LOST_RANKS");
  Result<WorkerIdentity> old = worker_identity_from_env(fake_env(old_vars));
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(old->attempt, 0);
  EXPECT_TRUE(old->lost_ranks.empty());
  old_vars["NTP_LOST_RANKS"] = "";
  EXPECT_TRUE(worker_identity_from_env(fake_env(old_vars))->lost_ranks.empty());
  // Malformed values are errors naming the variable.
  expect_rejected(vars,
                  {{"NTP_LOST_RANKS", "1,,2"}, {"NTP_LOST_RANKS", "8"}, {"NTP_ATTEMPT", "-1"}});

  vars.erase("NTP_RANK");
  Result<WorkerIdentity> missing = worker_identity_from_env(fake_env(vars));
  EXPECT_EQ(missing.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("NTP_RANK"), std::string::npos);
}

// A domain (ntp launch --domain-size): its size and store come together, the size divides the
// world; the domain and slot follow from the rank. A launcher without it gives neither.
TEST(IdentityTest, ADomainsSizeAndStoreComeTogether) {
  WorkerIdentity id;
  id.rank = 5;
  id.world_size = 8;
  id.store = "file:/tmp/x";
  id.run_id = "job-1";
  std::map<std::string, std::string> vars = env_of(id);
  EXPECT_EQ(worker_identity_from_env(fake_env(vars))->domain_size, 0);
  id.domain_size = 4;
  id.domain_store = "redis://rack1-store:6379";
  vars = env_of(id);
  EXPECT_EQ(vars.size(), 13U);
  Result<WorkerIdentity> in_domain = worker_identity_from_env(fake_env(vars));
  ASSERT_TRUE(in_domain.ok()) << in_domain.status().to_string();
  EXPECT_EQ(in_domain->domain_size, 4);
  EXPECT_EQ(in_domain->domain_store, "redis://rack1-store:6379");
  EXPECT_EQ(in_domain->domain(), 1);
  EXPECT_EQ(in_domain->domain_slot(), 1);
  expect_rejected(vars,
                  {{"NTP_DOMAIN_SIZE", "3"}, {"NTP_DOMAIN_SIZE", "0"}, {"NTP_DOMAIN_STORE", ""}});
  vars.erase("NTP_DOMAIN_STORE");
  EXPECT_EQ(worker_identity_from_env(fake_env(vars)).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ntp::launch
