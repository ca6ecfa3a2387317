#pragma once
// Sequence-parallel ranks run one job: each draws the same batches and adds its shard's gradient to
// weights every rank holds, so a rank started with another seq_len, lr, data file or checkpoint
// trained a different model without a word (exit 0). Before training, every rank offers a CRC-32 of
// each thing that must match, and a difference ends the run on every rank, naming the first rank at
// fault and the thing.
#include <string>
#include <string_view>
#include <vector>

#include "linattn/model/sequence_parallel.hpp"

namespace linattn::model::detail {

struct AgreedItem {
  std::string name;   // what it is, for the message ("training option seq_len")
  std::string bytes;  // what must be equal on every rank (its CRC-32 is compared)
  std::string shown;  // this rank's value as a person reads it ("seq_len=16")
};

// The "key=value" lines of a config or options text (docs/model-format.md) as items named
// "<what> <key>", but for the keys in skip (paths, which may be spelt differently on each rank).
void add_lines(std::vector<AgreedItem>& items, std::string_view text, const std::string& what,
               const std::vector<std::string_view>& skip = {});

// A collective: every rank calls it with its items in the same order. Returns when every rank's
// items have the CRCs of rank 0's; else throws linattn::Error on every rank naming the first item
// and the lowest rank whose CRC differs (this rank's value shown). One process: returns at once.
void require_agreement(const SequenceParallel& parallel, const std::vector<AgreedItem>& items);

}  // namespace linattn::model::detail
