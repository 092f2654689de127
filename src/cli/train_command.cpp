// `ntp train`: one worker of a training job whose replicas may run at different TP degrees, run
// under `ntp launch` with one worker per device slot (docs/train.md).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/cli_error.h"
#include "cli/commands.h"
#include "comm/exit_notice.h"
#include "comm/wait_observer.h"
#include "launch/identity.h"
#include "launch/stall.h"
#include "launch/step_report.h"
#include "launch/throttle.h"
#include "train/trainer.h"
#include "train/weight_source.h"

namespace ntp::cli {
namespace {

struct TrainArgs {
  train::TrainConfig config;
  std::string failed;
  std::string model = "gpt2";
  std::string batch_policy = "boost";
  std::string optimizer = "replicated";
  std::string dtype = "fp32";
  std::string expert_dispatch = "allreduce";
  std::string control_plane = "flat";
  int64_t bucket_kb = 128;
  // The model flags, to tell which the user set (--init-from takes the model from its source).
  std::vector<CLI::Option*> model_options;
};

// --control-plane hierarchy needs the launcher's domain stores, one domain per replica, and (as
// yet) no worker that joins a running job.
Status check_hierarchy_launch(const train::TrainConfig& config, const launch::WorkerIdentity& id) {
  if (id.domain_size != config.tp) {
    return invalid_argument(
        "--control-plane hierarchy needs `ntp launch --domain-size " + std::to_string(config.tp) +
        "` (the --tp), which gives each worker "
        "its domain's store; this worker's launcher gave " +
        (id.domain_size == 0 ? std::string("none")
                             : "--domain-size " + std::to_string(id.domain_size)));
  }
  if (id.restart_count > 0) {  // this worker's own situation, said by it (not world rank 0's)
    return failed_precondition(
        "a replacement worker cannot join a --control-plane hierarchy job yet (joiners through "
        "the domain agreement are to come): run without --replace-failed or repair: faults, or "
        "with --control-plane flat");
  }
  return ok_status();
}

// --init-from: the model comes from the source's config; explicit model flags must agree with
// it, and --vocab-multiple must not pad its vocabulary.
Status adopt_init_model(TrainArgs& args) {
  train::TrainConfig& config = args.config;
  if (!config.resume.empty()) {
    return invalid_argument("--init-from " + config.init_from + " starts a new run and --resume " +
                            config.resume + " continues one; give only one of them");
  }
  Result<train::WeightSource> source = train::open_weight_source(config.init_from);
  if (!source.ok()) {
    return invalid_argument("--init-from " + config.init_from + ": " + source.status().message());
  }
  std::vector<std::string> given;
  for (const CLI::Option* option : args.model_options) {
    if (option->count() > 0) given.push_back(option->get_name());  // "--layers"
  }
  NTP_RETURN_IF_ERROR(train::adopt_source_model(config.model, *source, given));
  const int64_t vocab = config.model.vocab_size;
  NTP_RETURN_IF_ERROR(train::validate_train_config(config));
  if (config.model.vocab_size != vocab) {
    return invalid_argument("--vocab-multiple " + std::to_string(config.vocab_multiple) +
                            " pads the vocabulary of --init-from " + source->dir + " (" +
                            std::to_string(vocab) + ") to " +
                            std::to_string(config.model.vocab_size) + "; drop --vocab-multiple");
  }
  // Missing tensors and wrong shapes are found here, before any worker writes anything.
  if (Status s = train::check_weight_source(*source, config.model); !s.ok()) {
    return invalid_argument("--init-from " + config.init_from + ": " + s.message());
  }
  return ok_status();
}

// The worker's identity: from `ntp launch`, or a one-worker job run directly. After a restart by
// `ntp launch --restart-on-failure` (NTP_ATTEMPT > 0) the lost slots join --failed and the job
// resumes from --save-dir's latest checkpoint at the reduced layout.
Result<train::WorkerContext> worker_context(train::TrainConfig& config,
                                            std::string& temporary_store) {
  train::WorkerContext ctx;
  launch::EnvLookup env = launch::process_env();
  if (!env("NTP_RANK")) {
    if (config.world_slots() != 1) {
      return invalid_argument("a job of " + std::to_string(config.world_slots()) +
                              " device slots (--domains x --tp) runs under `ntp launch "
                              "--nproc-per-node " +
                              std::to_string(config.world_slots()) + " -- ntp train ...`");
    }
    temporary_store =
        (std::filesystem::temp_directory_path() / ("ntp-train-" + std::to_string(::getpid())))
            .string();
    NTP_ASSIGN_OR_RETURN(ctx.store, comm::open_store("file:" + temporary_store, "solo"));
    return ctx;
  }
  NTP_ASSIGN_OR_RETURN(launch::WorkerIdentity id, launch::worker_identity_from_env(env));
  if (id.world_size != config.world_slots()) {
    return invalid_argument(
        "ntp launch started " + std::to_string(id.world_size) + " workers but --domains " +
        std::to_string(config.domains) + " x --tp " + std::to_string(config.tp) + " = " +
        std::to_string(config.world_slots()) + " device slots; make them equal");
  }
  ctx.slot_rank = id.rank;
  ctx.attempt = id.attempt;
  ctx.restart_count = id.restart_count;
  ctx.local_addr = id.local_addr;
  if (id.attempt > 0) {
    for (int lost : id.lost_ranks) {
      const shard::SlotRef slot{lost / config.tp, lost % config.tp};
      if (!std::binary_search(config.failed.begin(), config.failed.end(), slot)) {
        config.failed.push_back(slot);
      }
    }
    std::sort(config.failed.begin(), config.failed.end());
    if (config.resume.empty() && !config.save_dir.empty()) config.resume = "auto";
    NTP_RETURN_IF_ERROR(train::validate_train_config(config));
  }
  NTP_ASSIGN_OR_RETURN(ctx.store, comm::open_store(id.store, id.run_id));
  NTP_ASSIGN_OR_RETURN(ctx.beat_store, comm::open_store(id.store, id.run_id));
  if (config.control_plane == train::ControlPlane::kHierarchy) {
    NTP_RETURN_IF_ERROR(check_hierarchy_launch(config, id));
    NTP_ASSIGN_OR_RETURN(ctx.domain_store, launch::open_domain_store(id));
  }
  comm::Store* store = ctx.store.get();
  const int rank = id.rank;
  // The step report first, so that `ntp launch` sees the step at which an injected stall blocks
  // this thread (launch/stall.h). It is a wait on the store, not this worker's own progress: with
  // the file store a write is a rename, which a busy disk held for 672 ms in CI, and a worker
  // whose training thread stood still that long in a step was taken as hung.
  ctx.on_step = [store, rank, report = launch::steps_wanted()](int64_t step) {
    if (report) {
      const comm::ScopedWait on_the_store;
      (void)launch::report_step(*store, rank, step);
    }
    launch::stall_if_asked(step);
  };
  ctx.compute_factor = [](int64_t step) { return launch::throttle_factor(step); };
  return ctx;
}

int run(TrainArgs& args) {
  train::TrainConfig& config = args.config;
  const char* rank_env = std::getenv("NTP_RANK");
  const bool speaker = rank_env == nullptr || std::string(rank_env) == "0";
  auto bad = [&](const Status& s) { return speaker ? report_error("train", s) : kExitBadInput; };

  Result<std::vector<shard::SlotRef>> failed = shard::parse_slot_list(args.failed, "--failed");
  if (!failed.ok()) return bad(failed.status());
  config.failed = *failed;
  Result<model::ModelFamily> family = model::parse_model_family(args.model);
  if (!family.ok()) return bad(family.status());
  config.model.family = *family;
  Result<train::BatchPolicy> policy = train::parse_batch_policy(args.batch_policy);
  if (!policy.ok()) return bad(policy.status());
  config.batch_policy = *policy;
  Result<train::OptimizerSharding> sharding = train::parse_optimizer_sharding(args.optimizer);
  if (!sharding.ok()) return bad(sharding.status());
  config.optimizer = *sharding;
  Result<train::ControlPlane> plane = train::parse_control_plane(args.control_plane);
  if (!plane.ok()) return bad(plane.status());
  config.control_plane = *plane;
  Result<kernels::cpu::MatmulDtype> dtype = train::parse_matmul_dtype(args.dtype);
  if (!dtype.ok()) return bad(dtype.status());
  config.dtype = *dtype;
  Result<model::ExpertDispatch> dispatch = model::parse_expert_dispatch(args.expert_dispatch);
  if (!dispatch.ok()) return bad(dispatch.status());
  config.expert_dispatch = *dispatch;
  config.bucket_bytes = args.bucket_kb * 1024;
  if (!config.init_from.empty()) {
    if (Status s = adopt_init_model(args); !s.ok()) return bad(s);
  }
  if (Status s = train::validate_train_config(config); !s.ok()) return bad(s);

  std::string temporary_store;
  Result<train::WorkerContext> ctx = worker_context(config, temporary_store);
  if (!ctx.ok()) {
    return ctx.status().code() == StatusCode::kInvalidArgument
               ? bad(ctx.status())
               : report_error("train", ctx.status());
  }
  const shard::SlotRef slot{ctx->slot_rank / config.tp, ctx->slot_rank % config.tp};
  Result<train::TrainSummary> summary = train::run_training(config, *ctx);
  if (!temporary_store.empty()) std::filesystem::remove_all(temporary_store);
  if (!summary.ok()) {
    return summary.status().code() == StatusCode::kInvalidArgument
               ? bad(summary.status())
               : report_error("train", summary.status());
  }
  if (!summary->stopped.empty()) {  // one survivor says why; every one fails
    if (summary->speaks) std::fprintf(stderr, "ntp train: error: %s\n", summary->stopped.c_str());
    return kExitFailure;
  }
  if (summary->took_part && temporary_store.empty()) {
    // Tells `ntp launch` that the job trained to its end, so that workers lost on the way do not
    // make its exit code a failure (launch/step_report.h).
    (void)launch::report_finished(*ctx->store, ctx->slot_rank,
                                  comm::incarnation(ctx->attempt, ctx->restart_count),
                                  summary->steps);
  }
  if (!summary->took_part && summary->left.empty()) {
    std::printf("slot %d:%d is failed (--failed): this worker takes no part\n", slot.domain,
                slot.slot);
  } else if (!summary->took_part) {
    std::printf("slot %d:%d: %s\n", slot.domain, slot.slot, summary->left.c_str());
    if (summary->fenced) {  // `ntp launch --replace-failed` starts a successor that rejoins
      (void)launch::report_left(*ctx->store, ctx->slot_rank, ctx->restart_count);
    }
  }
  return kExitOk;
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TrainArgs>();
  train::TrainConfig& c = args->config;
  c.model.n_layer = 2;
  c.model.n_head = 8;
  c.model.n_embd = 64;
  c.model.n_ctx = 64;
  c.model.ffn_unit = 8;
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a GPT-2 or a Llama with replicas of different TP degrees (one worker per device slot, "
      "run "
      "under `ntp launch --nproc-per-node DOMAINS*TP -- ntp train ...`; docs/train.md)");
  cmd->option_defaults()->always_capture_default();

  auto cluster = "Cluster";
  cmd->add_option("--domains", c.domains, "Scale-up domains, one DP replica each")->group(cluster);
  cmd->add_option("--tp", c.tp, "Device slots per domain: a healthy replica's TP degree")
      ->group(cluster);
  cmd->add_option("--failed", args->failed,
                  "Failed slots DOMAIN:SLOT[,...]; their replicas run at a lower degree and "
                  "their workers exit 0 at once (every slot of a domain: its replica left the "
                  "job, the others take its samples)")
      ->group(cluster);
  cmd->add_option("--min-tp", c.min_tp, "No replica may run below this degree")->group(cluster);
  cmd->add_option("--strategy", c.strategy,
                  "Gradient sync across degrees: fold (Megatron-style core/extra ranks) or "
                  "native (healthy replicas keep their layout)")
      ->group(cluster);

  auto model = "Model";
  // A model flag: in the Model group, and listed so that --init-from can tell it was given.
  auto model_flag = [&](CLI::Option* option) {
    args->model_options.push_back(option->group(model));
  };
  model_flag(cmd->add_option(
      "--model", args->model,
      "Model family: gpt2, llama (RMSNorm, RoPE, SwiGLU, grouped-query attention, "
      "untied LM head; docs/model.md) or moe (Llama with Mixtral MoE FFNs: --experts, "
      "--top-k)"));
  model_flag(cmd->add_option("--layers", c.model.n_layer, "Transformer blocks"));
  model_flag(cmd->add_option("--heads", c.model.n_head, "Attention heads (a TP unit each)"));
  model_flag(cmd->add_option("--kv-heads", c.model.n_kv_head,
                             "Llama: key/value heads, dividing --heads (0: one per query head)"));
  model_flag(cmd->add_option("--rope-theta", c.model.rope_theta, "Llama: RoPE base"));
  model_flag(cmd->add_option(
      "--experts", c.model.n_experts,
      "MoE: routed experts per layer (a TP unit each; --ffn is one expert's width)"));
  model_flag(cmd->add_option("--top-k", c.model.top_k, "MoE: experts per token"));
  model_flag(cmd->add_option(
      "--shared-experts", c.model.n_shared_experts,
      "MoE: shared experts (every token, weight 1; their columns are the FFN units)"));
  model_flag(
      cmd->add_option("--router-aux-coef", c.model.router_aux_loss_coef,
                      "MoE: weight of the load-balancing loss (Mixtral's router_aux_loss_coef)"));
  model_flag(cmd->add_option("--width", c.model.n_embd, "Model width (a multiple of --heads)"));
  model_flag(cmd->add_option("--context", c.model.n_ctx, "Sequence length"));
  model_flag(cmd->add_option("--ffn", c.model.n_ffn, "FFN width; 0 means 4 x width"));
  cmd->add_option("--ffn-unit", c.model.ffn_unit, "FFN columns per TP unit")->group(model);
  cmd->add_option("--vocab-multiple", c.vocab_multiple,
                  "Pad the 256-byte vocabulary to a multiple of this")
      ->group(model);
  cmd->add_option("--seed", c.seed, "Initialization seed (same weights at any layout)")
      ->group(model);
  cmd->add_option("--dtype", args->dtype,
                  "Matrix-product inputs: fp32, or bf16 (weights and activations rounded to "
                  "bf16 as products read them, float32 sums; master weights, gradients and "
                  "AdamW state stay float32)")
      ->group(model);

  cmd->add_option("--expert-dispatch", args->expert_dispatch,
                  "MoE: how tokens meet the experts of the other TP ranks: allreduce (every rank "
                  "routes every token, one all-reduce sums the experts' outputs) or alltoall "
                  "(each rank routes its slice of the tokens and sends them to their experts' "
                  "ranks by all-to-all-v; less traffic from TP > 2 x --top-k; no shared "
                  "experts); the losses agree up to float rounding")
      ->group(model);

  auto data = "Data";
  cmd->add_option("--train-data", c.train_data, "Training tokens (llm.c .bin)")->group(data);
  cmd->add_option("--val-data", c.val_data, "Held-out tokens (llm.c .bin)")->group(data);
  cmd->add_option("--data-seed", c.data_seed, "Seed of the sample order")->group(data);

  auto batch = "Batch";
  cmd->add_option("--batch", c.batch,
                  "Global batch in sequences per step (0: domains x grad-accum x micro-batch)")
      ->group(batch);
  cmd->add_option("--micro-batch", c.micro_batch, "Sequences per forward/backward")->group(batch);
  cmd->add_option("--grad-accum", c.grad_accum,
                  "Micro-batches per replica and step, when --batch is not given")
      ->group(batch);
  cmd->add_option("--batch-policy", args->batch_policy,
                  "Replicas slower than a healthy one (fewer devices, a slowed device): keep "
                  "(same share: the slowest sets the pace), scale (share proportional to pace, "
                  "to the sample) or boost (power boost as far as the control can apply, the "
                  "share covers the rest; on CPU, where nothing can be boosted, this is scale). "
                  "Default: boost. For --model moe, scale and boost move whole micro-batches, "
                  "so that every forward holds the samples it holds in a failure-free run: the "
                  "load-balancing loss, a statistic of each forward, is unchanged")
      ->group(batch);
  cmd->add_option("--power-limit", c.power_limit,
                  "Largest power factor x TDP the devices' control can set (boost); 1 on CPU, "
                  "where a higher value only emulates a control for tests (settings recorded, "
                  "the split assumes their speed-up)")
      ->capture_default_str()
      ->group(batch);

  auto optim = "Optimizer";
  cmd->add_option("--steps", c.steps, "Training steps")->group(optim);
  cmd->add_option("--lr", c.lr, "Peak learning rate")->group(optim);
  cmd->add_option("--min-lr", c.min_lr, "Learning rate at the end of the cosine decay")
      ->group(optim);
  cmd->add_option("--warmup", c.warmup, "Linear warm-up steps")->group(optim);
  cmd->add_option("--beta1", c.beta1, "AdamW beta1")->group(optim);
  cmd->add_option("--beta2", c.beta2, "AdamW beta2")->group(optim);
  cmd->add_option("--eps", c.eps, "AdamW epsilon")->group(optim);
  cmd->add_option("--weight-decay", c.weight_decay, "AdamW decoupled decay (matrices only)")
      ->group(optim);
  cmd->add_option("--grad-clip", c.grad_clip, "Global gradient-norm clip; 0 = none")->group(optim);
  cmd->add_option("--optimizer", args->optimizer,
                  "AdamW state replicated in every replica, or sharded over each DP group "
                  "(ZeRO-1)")
      ->group(optim);
  cmd->add_option("--eval-every", c.eval_every, "Held-out loss every N steps (0: at the end)")
      ->group(optim);
  cmd->add_option("--eval-samples", c.eval_samples, "Held-out sequences per evaluation")
      ->group(optim);

  auto output = "Output";
  cmd->add_option("--out", c.out_dir, "Output folder")->group(output);
  cmd->add_option("--metrics", c.metrics_file, "JSON-lines metrics (default OUT/metrics.jsonl)")
      ->group(output);
  cmd->add_flag("--quiet", c.quiet, "No per-step progress lines")->group(output);
  cmd->add_option("--dump-dir", c.dump_dir,
                  "Testing: each worker writes its synchronized step-0 gradients and final "
                  "weights as logical tensors")
      ->group("");
  cmd->add_option("--emulate-device-gflops", c.emulate_device_gflops,
                  "Benchmarks on fewer cores than workers: each micro-batch also sleeps the time "
                  "a device of G GFLOP/s would take for it (throttles scale it); 0: off")
      ->group("");

  auto ckpt = "Checkpoints";
  cmd->add_option("--save-dir", c.save_dir, "Write checkpoints here (docs/checkpoint.md)")
      ->group(ckpt);
  cmd->add_option("--save-every", c.save_every,
                  "Checkpoint after every N steps (0: only at the end of the run)")
      ->group(ckpt);
  cmd->add_option("--keep-last", c.keep_last, "Complete checkpoints to keep (0: all)")->group(ckpt);
  cmd->add_option("--resume", c.resume,
                  "Continue from a checkpoint (a step or save directory) written at any layout; "
                  "'auto': --save-dir's latest if there is one")
      ->group(ckpt);
  cmd->add_option("--init-from", c.init_from,
                  "Start a new run (step 0, fresh optimizer) from these weights, at any layout: a "
                  "Hugging Face directory (config.json + model.safetensors: GPT2LMHeadModel, "
                  "LlamaForCausalLM, MixtralForCausalLM, or Qwen2MoeForCausalLM as ntp exports "
                  "it) or an ntp checkpoint. The model (family, layers, heads, KV "
                  "heads, width, FFN, vocabulary, context, RoPE theta) comes from it; a model flag "
                  "that disagrees is an error. --resume's checkpoint, when there is one, wins "
                  "(restarts)")
      ->group(ckpt);
  cmd->add_option("--stop-after", c.stop_after,
                  "Stop after this many steps of this run (the schedule still spans --steps); "
                  "with --save-dir a checkpoint is written at the stop")
      ->group(ckpt);

  cmd->add_option("--control-plane", args->control_plane,
                  "Recovery protocol: flat (every worker in one agreement on the job's store) or "
                  "hierarchy (each domain agrees on its own store, its leader in the global "
                  "round; needs ntp launch --domain-size TP; experimental: kills and hangs only, "
                  "no repairs, --min-tp 1, rebalancing off; docs/recovery.md)")
      ->group(ckpt);
  cmd->add_flag("!--no-live-recovery", c.live_recovery,
                "A failure ends the job instead of re-forming it in the same processes (the "
                "checkpoint-restart baseline with ntp launch --restart-on-failure)")
      ->group(ckpt);

  cmd->add_flag("--rebalance,!--no-rebalance", c.rebalance,
                "On by default: measure every rank's compute speed and, when one is clearly slow "
                "(throttled, a noisy neighbour), re-form with the same members and a "
                "speed-weighted layout: the slow rank owns fewer units, only units whose owner "
                "changes move, the replica's batch share follows its pace (--batch-policy), and "
                "the layout goes back to equal shares once it recovers (a rebalanced line in "
                "metrics.jsonl). Noise does not move units: a rank must be off by 5 standard "
                "errors over an 8-step window, the move must gain 10% three times in a row, and "
                "what it would have saved must reach what a re-formation costs "
                "(--rebalance-cost-s; docs/recovery.md). --no-rebalance turns it, and "
                "--drop-below, off")
      ->group(ckpt);
  cmd->add_option("--rebalance-cost-s", c.rebalance_cost_s,
                  "Seconds a re-formation costs this job: a move onto weighted shares (or back) "
                  "waits until the step time it would have saved adds up to this; < 0: measured "
                  "(the last re-formation, the first job's build before any)")
      ->capture_default_str()
      ->group(ckpt);
  cmd->add_option("--drop-below", c.drop_below,
                  "A rank measured slowed whose speed stays below this fraction of the job's "
                  "median for 3 evaluations in a row is treated as failed: it leaves the job, "
                  "holding nothing, and rejoins as a repair once its "
                  "own probe finds it back above the bound (0: never)")
      ->capture_default_str()
      ->group(ckpt);

  auto runtime = "Runtime";
  cmd->add_option("--bucket-kb", args->bucket_kb, "Gradient sync bucket size (KiB of parameters)")
      ->group(runtime);
  cmd->add_option("--timeout-ms", c.comm_timeout_ms,
                  "Communicator timeout: a collective that makes no progress this long fails "
                  "(the last resort; hangs are found sooner by --hang-detect-ms)")
      ->group(runtime);
  cmd->add_option(
         "--hang-detect-ms", c.hang_detect_ms,
         "A worker whose heartbeat (every quarter of this) stops this long, or whose training "
         "thread makes no progress this long while not waiting on its peers (ten times "
         "as long in the first step, a checkpoint, an evaluation or a re-formation), is "
         "taken as hung and the job re-forms without it (at least 300)")
      ->group(runtime);

  cmd->callback([&exit_code, args] { exit_code = run(*args); });
}

}  // namespace ntp::cli
