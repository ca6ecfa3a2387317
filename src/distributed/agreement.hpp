#pragma once
// The agreement that every sequence-parallel call starts with, before any arithmetic: each rank
// publishes its operation's name, its shape signature and the outcome of its local argument checks
// in one MPI_Allgather. Then every rank reaches the same verdict from the same table: a rank whose
// checks failed, or a field that must agree and does not, makes every rank throw linattn::Error
// naming that rank, so that no rank is left waiting in a later collective.
#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace linattn::distributed::detail {

// One rank's signature: named integer fields, in the same order on every rank (the same code
// builds them), each either shared (must equal rank 0's) or this rank's own (a shard length).
class Signature {
 public:
  static constexpr int kMaxFields = 24;
  // A field every rank must report with the same value, e.g. shared("q head dim", q.dim()).
  void shared(const char* name, int64_t value) { add(name, value, true); }
  // A field of this rank only (may differ between ranks), e.g. own("shard length", q.seq()).
  void own(const char* name, int64_t value) { add(name, value, false); }
  // This rank's local checks failed with message (the first failure is kept).
  void fail(std::string message) {
    if (failure_.empty()) failure_ = std::move(message);
  }

  int size() const { return static_cast<int>(fields_.size()); }
  const char* name(int i) const { return fields_[i].name; }
  int64_t value(int i) const { return fields_[i].value; }
  bool is_shared(int i) const { return fields_[i].shared; }
  const std::string& failure() const { return failure_; }

 private:
  struct Field {
    const char* name;
    int64_t value;
    bool shared;
  };
  void add(const char* name, int64_t value, bool shared);
  std::vector<Field> fields_;
  std::string failure_;
};

// Runs checks(signature) and turns a linattn::Error (or any std::exception) it throws into this
// rank's failure, so the verdict can reach every rank.
void run_local_checks(Signature& signature, const std::function<void()>& checks);

// Every rank's fields, as the agreement gathered them.
class Agreement {
 public:
  Agreement(int ranks, int fields) : ranks_(ranks), fields_(fields), values_(size_t(ranks) * fields) {}
  int ranks() const { return ranks_; }
  // Field i of rank r.
  int64_t value(int rank, int i) const { return values_[size_t(rank) * fields_ + i]; }
  int64_t& value(int rank, int i) { return values_[size_t(rank) * fields_ + i]; }

 private:
  int ranks_, fields_;
  std::vector<int64_t> values_;
};

// The one Allgather (a fixed record per rank: operation name, status, fields, failure message).
// Throws linattn::Error on every rank, with the same message, when any rank's checks failed (the
// lowest such rank is named, with its message), when a rank calls another operation, or when a
// shared field differs from rank 0's (the lowest such rank and field, with both values).
Agreement agree(MPI_Comm comm, std::string_view operation, const Signature& local);

}  // namespace linattn::distributed::detail
