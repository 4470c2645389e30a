// The memory plan with --offload-kv: the offloaded layers' KV is counted as
// pinned host memory (not against the GPU), the on-chip layers and the two
// staging layers as device memory, and a host that cannot hold the pinned
// KV is refused with the numbers.
#include <gtest/gtest.h>

#include "core/check.h"
#include "model/memory_plan.h"
#include "model/weights_device.h"

using namespace tf;

namespace {

double item(const MemoryPlan& p, const std::string& prefix, bool host) {
  double b = 0;
  for (const auto& i : p.items)
    if (i.what.rfind(prefix, 0) == 0 && i.host == host) b += i.bytes;
  return b;
}

}  // namespace

TEST(MemoryPlanOffload, HostAndDeviceBytes) {
  const ModelConfig c = synthetic_config("synthetic:llama2-7b-128k");
  PlanRequest r;
  r.device = Device::CUDA;
  r.dtype = DType::BF16;
  r.context = 131072;
  const MemoryPlan on_device = plan_memory(c, r);
  const double kv = 2.0 * 32 * 32 * 128 * 2 * 131072;  // 64 GiB
  EXPECT_DOUBLE_EQ(item(on_device, "full KV cache", false), kv);
  EXPECT_EQ(on_device.host_total(), 0.0);

  r.offload_kv = true;
  const MemoryPlan all = plan_memory(c, r);
  EXPECT_DOUBLE_EQ(all.host_total(), kv);
  EXPECT_DOUBLE_EQ(item(all, "full KV cache", false), 0.0);
  EXPECT_DOUBLE_EQ(item(all, "KV offload staging", false), 2.0 * kv / 32);
  EXPECT_NEAR(all.total(), on_device.total() - kv + 2.0 * kv / 32, 1.0);

  r.on_chip_layers = 8;
  r.kv_copies = 2;
  const MemoryPlan part = plan_memory(c, r);
  EXPECT_DOUBLE_EQ(item(part, "full KV cache", false), kv / 4);
  EXPECT_DOUBLE_EQ(part.host_total(), 2.0 * kv * 3 / 4);  // two pinned copies of 24 layers

  EXPECT_NO_THROW(check_host_fits(all, 2.0 * kv));
  try {
    check_host_fits(all, kv / 2);
    FAIL() << "a host of half the pinned KV was accepted";
  } catch (const tf::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("64.00 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("32.00 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("--on-chip-layers"), std::string::npos) << m;
  }
  // Pinned bytes do not count against the GPU.
  EXPECT_NO_THROW(check_plan_fits(all, all.total() + 1, "the GPU"));
}
