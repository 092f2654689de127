// Error messages of the `ntp` binary itself (not of one subcommand), through the real binary:
// exit code 2, one line on stderr that names the bad value and what is allowed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.h"

namespace ntp {
namespace {

testing::CommandOutput ntp(std::vector<std::string> args) {
  args.insert(args.begin(), NTP_BINARY);
  return testing::run_command(args);
}

void expect_one_line_bad_input(const testing::CommandOutput& run) {
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
}

TEST(CliMessages, AnUnknownCommandNamesItAndListsTheCommands) {
  const auto run = ntp({"bogus"});
  expect_one_line_bad_input(run);
  EXPECT_NE(run.err.find("unknown command 'bogus'"), std::string::npos) << run.err;
  for (const char* command : {"plan", "sim", "power", "launch"}) {
    EXPECT_NE(run.err.find(command), std::string::npos) << command << " missing: " << run.err;
  }
  EXPECT_EQ(run.err.find("comm-worker"), std::string::npos) << "hidden commands stay hidden";
}

TEST(CliMessages, NoCommandListsTheCommands) {
  const auto run = ntp({});
  expect_one_line_bad_input(run);
  EXPECT_NE(run.err.find("no command given"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("launch"), std::string::npos) << run.err;
}

TEST(CliMessages, ZeroWorkersPerNodeSaysAtLeastOne) {
  for (const char* bad : {"0", "-3"}) {
    const auto run = ntp({"launch", "--nproc-per-node", bad, "--", "true"});
    expect_one_line_bad_input(run);
    EXPECT_NE(run.err.find("--nproc-per-node " + std::string(bad) + " must be at least 1"),
              std::string::npos)
        << run.err;
    EXPECT_EQ(run.err.find("not in range"), std::string::npos) << run.err;
  }
}

// The batch flags of `ntp train` (checked before any worker starts; nothing is written).
TEST(CliMessages, BadBatchPolicyPowerLimitDeviceRateDropBelowAndCostNameTheValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--batch-policy", "fair"}, "--batch-policy 'fair' is unknown; use keep, scale or boost"},
      {{"--power-limit", "3"}, "--power-limit 3.000000 must be in [1, 2]"},
      {{"--power-limit", "0.5"}, "--power-limit 0.500000 must be in [1, 2]"},
      {{"--emulate-device-gflops", "-1"}, "--emulate-device-gflops -1.000000 must be >= 0"},
      {{"--rebalance", "--drop-below", "1"}, "--drop-below 1.000000 must be in (0, 1)"},
      {{"--drop-below", "-0.2"}, "--drop-below -0.200000 must be in (0, 1)"},
      {{"--rebalance-cost-s", "inf"}, "--rebalance-cost-s inf must be a number of seconds"}};
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"train", "--out", "/nonexistent/ntp-cli-test"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto run = ntp(args);
    expect_one_line_bad_input(run);
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
  }
}

// --dtype takes fp32 or bf16 only (fp16 has no path: its 5-bit exponent would need loss scaling).
TEST(CliMessages, BadDtypeNamesTheValueAndTheChoices) {
  for (const char* value : {"fp16", "float32", "BF16"}) {
    const auto run = ntp({"train", "--out", "/nonexistent/ntp-cli-test", "--dtype", value});
    expect_one_line_bad_input(run);
    EXPECT_NE(run.err.find(std::string("--dtype '") + value + "' is unknown; use fp32 or bf16"),
              std::string::npos)
        << run.err;
  }
}

// --expert-dispatch: a name it does not know, and alltoall where it cannot apply (no routed
// experts; shared experts, whose TP-sharded outputs need the all-reduce).
TEST(CliMessages, BadExpertDispatchNamesTheValueAndTheWayOut) {
  const std::string out = "/nonexistent/ntp-cli-test";
  const auto unknown = ntp({"train", "--out", out, "--expert-dispatch", "a2a"});
  expect_one_line_bad_input(unknown);
  EXPECT_NE(unknown.err.find("--expert-dispatch 'a2a' is unknown; use allreduce or alltoall"),
            std::string::npos)
      << unknown.err;
  const auto dense = ntp({"train", "--out", out, "--expert-dispatch", "alltoall"});
  expect_one_line_bad_input(dense);
  EXPECT_NE(dense.err.find("needs --model moe without shared experts (got --model gpt2"),
            std::string::npos)
      << dense.err;
  const auto shared = ntp({"train", "--out", out, "--model", "moe", "--experts", "4", "--heads",
                           "4", "--kv-heads", "2", "--width", "32", "--ffn", "16",
                           "--shared-experts", "1", "--expert-dispatch", "alltoall"});
  expect_one_line_bad_input(shared);
  EXPECT_NE(shared.err.find("--shared-experts 1); use --expert-dispatch allreduce"),
            std::string::npos)
      << shared.err;
}

// `ntp eval` and `ntp train --init-from` on bad Hugging Face directories and bad window flags.
// The fixture: a small Llama (4 heads, 2 KV heads, context 16) trained one step in one process
// and consolidated, plus a token file of 2,000 bytes.
class HfInputMessages : public ::testing::Test {
 protected:
  static std::filesystem::path dir() {
    return std::filesystem::temp_directory_path() / ("ntp-cli-hf-" + std::to_string(::getpid()));
  }
  static std::string data() { return (dir() / "tokens.bin").string(); }
  static std::string hf() { return (dir() / "hf").string(); }

  static void SetUpTestSuite() {
    std::filesystem::remove_all(dir());
    std::filesystem::create_directories(dir());
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;  // llm.c .bin: magic, version 1 (uint16 tokens), count
    header[1] = 1;
    header[2] = 2000;
    std::ofstream out(data(), std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    for (int i = 0; i < 2000; ++i) {
      const auto token = static_cast<uint16_t>("abcdefgh "[i % 9]);
      out.write(reinterpret_cast<const char*>(&token), 2);
    }
    out.close();
    const std::string save = (dir() / "ckpt").string();
    const auto train = ntp({"train",
                            "--model",
                            "llama",
                            "--layers",
                            "1",
                            "--heads",
                            "4",
                            "--kv-heads",
                            "2",
                            "--width",
                            "16",
                            "--context",
                            "16",
                            "--ffn-unit",
                            "4",
                            "--steps",
                            "1",
                            "--no-live-recovery",
                            "--train-data",
                            data(),
                            "--val-data",
                            data(),
                            "--save-dir",
                            save,
                            "--out",
                            (dir() / "out").string(),
                            "--quiet"});
    ASSERT_EQ(train.exit_code, 0) << train.err;
    const auto consolidate = ntp({"ckpt", "consolidate", save, "--out", hf()});
    ASSERT_EQ(consolidate.exit_code, 0) << consolidate.err;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir()); }

  // A copy of the export whose config.json has `patch` applied.
  static std::string patched(const std::string& name, const nlohmann::json& patch) {
    const std::filesystem::path copy = dir() / name;
    std::filesystem::remove_all(copy);
    std::filesystem::create_directories(copy);
    std::filesystem::copy_file(std::filesystem::path(hf()) / "model.safetensors",
                               copy / "model.safetensors");
    std::ifstream in(std::filesystem::path(hf()) / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config.update(patch);
    std::ofstream(copy / "config.json") << config.dump();
    return copy.string();
  }
};

TEST_F(HfInputMessages, BadHuggingFaceDirectoriesAreNamedByEvalAndInitFrom) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {patched("bert", {{"architectures", {"BertModel"}}}),
       "config.json: \"architectures\" [\"BertModel\"] is not supported; ntp reads "
       "[\"GPT2LMHeadModel\"], [\"LlamaForCausalLM\"], [\"MixtralForCausalLM\"] or "
       "[\"Qwen2MoeForCausalLM\"]"},
      {patched("layers", {{"num_hidden_layers", 2}}),
       "model.safetensors has no tensor model.layers.1.input_layernorm.weight"},
      {patched("ffn", {{"intermediate_size", 32}}),
       "model.safetensors: tensor model.layers.0.mlp.gate_proj.weight has shape [64, 16] but the "
       "model of config.json needs [32, 16]"},
      {patched("kv", {{"num_key_value_heads", 3}}),
       "\"num_attention_heads\" 4 is not a multiple of \"num_key_value_heads\" 3"}};
  for (const auto& [source, message] : cases) {
    const auto eval = ntp({"eval", source, "--data", data(), "--context", "16", "--batch", "2"});
    expect_one_line_bad_input(eval);
    EXPECT_NE(eval.err.find("ntp eval: error: " + source), std::string::npos) << eval.err;
    EXPECT_NE(eval.err.find(message), std::string::npos) << eval.err;
    const std::string out = (dir() / "never").string();
    std::filesystem::remove_all(out);
    const auto train = ntp({"train", "--init-from", source, "--no-live-recovery", "--train-data",
                            data(), "--val-data", data(), "--out", out});
    expect_one_line_bad_input(train);
    EXPECT_NE(train.err.find("--init-from " + source), std::string::npos) << train.err;
    EXPECT_NE(train.err.find(message), std::string::npos) << train.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << "nothing is written";
  }
}

TEST_F(HfInputMessages, BadWindowFlagsNameTheValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--context", "0", "--batch", "2"}, "--context 0 must be in [1, the model's context 16]"},
      {{"--context", "17", "--batch", "2"}, "--context 17 must be in [1, the model's context 16]"},
      {{"--context", "16", "--batch", "0"}, "--batch 0 must be at least 1"},
      {{"--context", "16", "--batch", "2", "--windows", "-1"}, "--windows -1 must be at least 1"},
      {{"--context", "16", "--batch", "2", "--offset", "-1"}, "--offset -1 must be at least 0"},
      {{"--context", "16", "--batch", "2", "--windows", "125"},
       "holds 2000 tokens, but 125 windows of --context 16 from --offset 0 need 2001; ask for at "
       "most --windows 124"},
      {{"--context", "16", "--batch", "2", "--offset", "1990"},
       "holds 2000 tokens, but 1 window of --context 16 from --offset 1990 need 2007; use a "
       "smaller --offset or --context"}};
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"eval", hf(), "--data", data()};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto run = ntp(args);
    expect_one_line_bad_input(run);
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
  }
  const auto ok = ntp({"eval", hf(), "--data", data(), "--context", "16", "--batch", "2"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"tokens\":1984,\"windows\":124}"), std::string::npos) << ok.out;
}

TEST_F(HfInputMessages, InitFromFlagsThatDisagreeWithTheSourceNameBothValues) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--heads", "8"},
       "--heads 8 conflicts with --init-from " + hf() +
           ", whose model has --heads 4; drop --heads (the model comes from the source)"},
      {{"--model", "gpt2"},
       "--model \"gpt2\" conflicts with --init-from " + hf() +
           ", whose model has --model \"llama\""},
      {{"--context", "32"},
       "--context 32 conflicts with --init-from " + hf() + ", whose model has --context 16"},
      {{"--resume", hf()},
       "--init-from " + hf() + " starts a new run and --resume " + hf() +
           " continues one; give only one of them"},
      {{"--vocab-multiple", "7"},
       "--vocab-multiple 7 pads the vocabulary of --init-from " + hf() +
           " (256) to 259; drop --vocab-multiple"}};
  for (const auto& [flags, message] : cases) {
    const std::string out = (dir() / "never").string();
    std::filesystem::remove_all(out);
    std::vector<std::string> args = {"train",        "--init-from", hf(),    "--no-live-recovery",
                                     "--train-data", data(),        "--out", out};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto run = ntp(args);
    expect_one_line_bad_input(run);
    EXPECT_NE(run.err.find(message), std::string::npos) << run.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << "nothing is written";
  }
}

}  // namespace
}  // namespace ntp
