// `triforce merge OUT.h5 SHARD.h5...`: one results file from the shards of a
// sweep. Every input must carry the same schema and the same /config (the
// shards of one sweep); a run key found twice (a duplicate) or two runs with
// one grid index but different keys (a conflict) stop the merge with a
// one-line error and no output. Root attributes of each input are kept under
// /shards/<k> (with its file name); those equal in every input are also
// copied to the root. Runs keep their group names (grid indices).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tf::sweep {

struct MergeStats {
  int64_t runs = 0, inputs = 0;
  int64_t grid_points = -1;  // from the inputs' grid_points attribute; -1 if absent
};

MergeStats merge_files(const std::string& out, const std::vector<std::string>& inputs);

// Validates files as a merge would (schema, runs, /summary) without writing;
// with `list`, prints one line per run: index, key, n_generated, tokens hash.
int64_t check_files(const std::vector<std::string>& inputs, bool list);

}  // namespace tf::sweep
