// The sweep INI (`triforce sweep --config`, strict: unknown keys are errors),
// the grid it describes (lists, FIRST:LAST:STEP ranges, simulated-acceptance
// tuples, re-retrieval policies), its expansion into points and the shard.
#include <sstream>

#include "cli/sweep_options.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace po = boost::program_options;
  po::options_description desc;
  tf::cli::add_sweep_options(desc);
  po::variables_map vm;
  try {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    po::store(po::parse_config_file(in, desc, /*allow_unregistered=*/false), vm);
    po::notify(vm);
  } catch (const po::error&) {  // cmd_sweep turns these into a one-line tf::Error
    return 0;
  }
  try {
    if (!vm.count("context")) return 0;  // cmd_sweep requires it before building the grid
    tf::sweep::GridSpec g = tf::cli::grid_from_options(vm);
    g.n_prompts = 1 + int64_t(size % 3);
    const int64_t bound = tf::sweep::grid_points_bound(g);
    // Grids between 20000 points and the limit are valid but slow to expand; both sides of the limit are cheap.
    if (bound > 20000 && bound <= tf::sweep::kMaxGridPoints) return 0;
    const auto all = tf::sweep::expand(g);
    const auto shard = tf::sweep::Shard::parse(vm["shard"].as<std::string>());
    tf::sweep::select_shard(all, shard);
  } catch (const tf::Error&) {
  }
  return 0;
}
