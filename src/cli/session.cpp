#include "cli/session.h"

#include "core/device.h"
#include "parallel/launch.h"
#include "parallel/gpu_comm.h"
#include "parallel/tensor_parallel.h"
#include "model/weights_device.h"
#ifdef TRIFORCE_HAVE_CUDA
#include "device_release.cuh"
#endif

namespace tf::cli {

#ifdef TRIFORCE_HAVE_CUDA
namespace {
// The process's GPU communicator under a launcher (made once, with the first CUDA model).
parallel::Communicator* g_gpu_comm = nullptr;
void release_gpu_comm() {
  delete g_gpu_comm;
  g_gpu_comm = nullptr;
}
}  // namespace
#endif

DeviceChoice parse_device(const std::string& device, const std::string& dtype) {
  DeviceChoice d;
  TF_CHECK(device == "cpu" || device == "cuda", "--device: expected cpu or cuda, got '" << device << "'");
  if (device == "cpu") return d;
#ifndef TRIFORCE_HAVE_CUDA
  TF_FAIL("--device cuda: this build has no CUDA backend (configure with nvcc present)");
#endif
  TF_CHECK(cuda_available(), "--device cuda: no CUDA device is visible");
  TF_CHECK(dtype == "f16" || dtype == "bf16", "--dtype: expected f16 or bf16, got '" << dtype << "'");
  d.device = Device::CUDA;
  d.dtype = dtype == "f16" ? DType::F16 : DType::BF16;
  return d;
}

void add_offload_options(boost::program_options::options_description& desc) {
  namespace po = boost::program_options;
  desc.add_options()("offload-kv", po::bool_switch(),
                     "keep the target's full KV cache in pinned host memory, streamed to the GPU layer by layer "
                     "(CUDA only)")(
      "on-chip-layers", po::value<int64_t>()->default_value(0),
      "with --offload-kv: the first K layers' KV stay on the GPU");
}

void apply_offload_options(const boost::program_options::variables_map& vm, int64_t num_layers, DeviceChoice& dev) {
  const bool off = vm.count("offload-kv") && vm["offload-kv"].as<bool>();
  const int64_t k = vm.count("on-chip-layers") ? vm["on-chip-layers"].as<int64_t>() : 0;
  TF_CHECK(k >= 0 && k <= num_layers, "--on-chip-layers: " << k << " is outside [0, " << num_layers << "]");
  TF_CHECK(off || k == 0, "--on-chip-layers: needs --offload-kv");
  if (!off) return;
  TF_CHECK(dev.device == Device::CUDA,
           "--offload-kv: needs --device cuda (a CPU cache already lives in host memory)");
  dev.offload.enabled = true;
  dev.offload.on_chip_layers = k;
  dev.plan.offload_kv = true;
  dev.plan.on_chip_layers = k;
}

ModelConfig peek_config(const std::string& path) {
  if (is_synthetic_path(path)) return synthetic_config(path);
  return open_checkpoint(path).config;
}

Session open_session(const std::string& path, int64_t kv_capacity, bool with_tokenizer, const DeviceChoice& dev) {
  Session s;
  s.path = path;
  s.dev = dev;
  const bool synthetic = is_synthetic_path(path);
  std::unique_ptr<Checkpoint> ck;
  ModelConfig cfg;
  if (synthetic) {
    cfg = synthetic_config(path);
  } else {
    ck = std::make_unique<Checkpoint>(open_checkpoint(path));
    cfg = ck->config;
    TF_CHECK(!cfg.shared_embedding.enabled,
             path << ": this checkpoint borrows its target's embedding (triforce_shared_embedding in config.json): "
                     "it is a draft; give it as --draft PATH with its target as the model");
  }
  parallel::Communicator* nccl_comm = nullptr;
#ifdef TRIFORCE_HAVE_CUDA
  // Before anything touches a GPU: under a launcher each rank takes the GPU of
  // its local rank and joins the NCCL communicator (made once per process;
  // host-staged MPI when ranks share a GPU, see dist/gpu_comm.h).
  if (dev.device == Device::CUDA && parallel::world().mpi) {
    // Not a static object: ncclCommDestroy after MPI_Finalize / CUDA teardown can hang. main's
    // release_device_state destroys it before both, on every rank (its buffers are leaks otherwise).
    if (!g_gpu_comm) {
      g_gpu_comm = parallel::make_gpu_communicator().release();
      cuda::at_device_release(release_gpu_comm);
    }
    nccl_comm = g_gpu_comm;
  }
#endif
  const int64_t chunk = dev.max_chunk > 0             ? dev.max_chunk
                        : dev.offload.enabled           ? kOffloadPrefillChunk
                        : dev.device == Device::CUDA    ? kCudaPrefillChunk
                                                        : 512;
  PlanRequest pr = dev.plan;
  pr.device = dev.device;
  pr.dtype = dev.dtype;
  pr.max_chunk = chunk;
  if (parallel::world().mpi) pr.tp = parallel::world().size;
  pr.context = dev.plan_context > 0 ? dev.plan_context : (kv_capacity > 0 ? kv_capacity : 4096);
  s.plan = plan_memory(cfg, pr);
  if (dev.device == Device::CUDA) {
    size_t free_b = 0, total_b = 0;
    device_memory(free_b, total_b);
    check_plan_fits(s.plan, double(free_b), "the GPU");
    check_host_fits(s.plan, kv_offload::host_available_bytes());
  }
  // Tokenizer first: a bad tokenizer fails before the weights are read.
  if (with_tokenizer) {
    TF_CHECK(!synthetic, path << ": synthetic models have no tokenizer; give --prompt-tokens");
    s.tokenizer = load_tokenizer(path);
  }
  TF_CHECK(!(synthetic && parallel::tp_active() && dev.device != Device::CUDA),
           path << ": synthetic models are tensor-parallel on CUDA only (add --device cuda)");
  // Under a launcher (mpirun -np N, N >= 1) the CUDA model runs the NCCL
  // path: this rank's shard, NCCL allreduces and logits all-gather.
  if (nccl_comm) {
    const ShardSpec shard = parallel::tp_shard(cfg, path);
    LlamaWeights w = synthetic ? synthetic_weights(cfg, dev.device, dev.dtype, 1234, shard)
                               : upload_weights(LlamaWeights::load(*ck->weights, cfg, shard), dev.device, dev.dtype);
    s.model = std::make_unique<LlamaModel>(cfg, std::move(w), chunk, nccl_comm);
    s.model->set_kv_offload(dev.offload);  // each rank offloads its own KV heads
    if (kv_capacity > 0) s.cache = std::make_unique<FullKVCache>(s.model->make_cache(kv_capacity));
    return s;
  }
  if (synthetic) {
    s.model = std::make_unique<LlamaModel>(cfg, synthetic_weights(cfg, dev.device, dev.dtype), chunk);
  } else if (dev.device == Device::CUDA) {
    s.model = std::make_unique<LlamaModel>(
        cfg, upload_weights(LlamaWeights::load(*ck->weights, cfg), dev.device, dev.dtype), chunk);
  } else {
    s.model = parallel::load_model_shard(*ck, chunk);  // this rank's tensor-parallel shard (the whole model in one process)
  }
  s.model->set_kv_offload(dev.offload);
  if (kv_capacity > 0) s.cache = std::make_unique<FullKVCache>(s.model->make_cache(kv_capacity));
  return s;
}

}  // namespace tf::cli
