#include "model/rank_agreement.hpp"

#include <algorithm>

#include "linattn/error.hpp"
#include "linattn/file_io.hpp"

namespace linattn::model::detail {
namespace {
// Items a rank offers at most: a config and an options text have about 30 lines together.
constexpr size_t kSlots = 64;
}  // namespace

void add_lines(std::vector<AgreedItem>& items, std::string_view text, const std::string& what,
               const std::vector<std::string_view>& skip) {
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    const std::string_view key = line.substr(0, line.find('='));
    if (line.empty() || std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    items.push_back({what + " " + std::string(key), std::string(line), std::string(line)});
  }
}

void require_agreement(const SequenceParallel& parallel, const std::vector<AgreedItem>& items) {
  const int ranks = parallel.ranks(), rank = parallel.rank();
  if (ranks == 1) return;
  if (items.size() > kSlots)
    throw Error("linattn::model: " + std::to_string(items.size()) + " items to agree on, expected ≤ " +
                std::to_string(kSlots) + " (an internal limit)");
  // One slot per (rank, item), zero but this rank's own: the sum shows every rank all the CRCs
  // (each below 2^32, exact in a double). A rank with fewer items leaves zeros, which differ too.
  std::vector<double> crcs(size_t(ranks) * kSlots, 0.0);
  for (size_t i = 0; i < items.size(); ++i) crcs[size_t(rank) * kSlots + i] = double(crc32(items[i].bytes)) + 1;
  parallel.sum(crcs);
  // Every rank reads the same sums, so every rank finds the same item and rank and throws.
  for (size_t i = 0; i < kSlots; ++i)
    for (int r = 1; r < ranks; ++r) {
      if (crcs[size_t(r) * kSlots + i] == crcs[i]) continue;
      const std::string name = i < items.size() ? items[i].name : "items (rank " + std::to_string(rank) + " has fewer)";
      throw Error("linattn::model: the ranks of a sequence-parallel run disagree: rank " + std::to_string(r) + "'s " +
                  name + " differs from rank 0's" +
                  (i < items.size() ? " (rank " + std::to_string(rank) + " has " + items[i].shown + ")" : "") +
                  "; start every rank with the same flags, data and checkpoint");
    }
}

}  // namespace linattn::model::detail
