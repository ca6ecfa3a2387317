#include "distributed/agreement.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include "distributed/mpi_calls.hpp"
#include "linattn/error.hpp"

namespace linattn::distributed::detail {

namespace {

constexpr int kNameBytes = 64;
constexpr int kMessageBytes = 448;

// One rank's record, sent as raw bytes (every rank runs the same binary layout: one job, one ABI).
struct Record {
  char operation[kNameBytes];
  int64_t failed;
  int64_t fields;
  int64_t values[Signature::kMaxFields];
  char message[kMessageBytes];
};

void copy_text(char* to, int capacity, std::string_view text) {
  const size_t n = std::min<size_t>(text.size(), size_t(capacity) - 1);
  std::memcpy(to, text.data(), n);
  to[n] = '\0';
}

}  // namespace

void Signature::add(const char* name, int64_t value, bool shared) {
  if (size() == kMaxFields) throw Error("linattn: internal: a signature holds at most 24 fields");
  fields_.push_back({name, value, shared});
}

void run_local_checks(Signature& signature, const std::function<void()>& checks) {
  try {
    checks();
  } catch (const std::exception& e) {
    signature.fail(e.what());
  }
}

Agreement agree(MPI_Comm comm, std::string_view operation, const Signature& local) {
  const int ranks = comm_size(comm);
  Record mine{};
  copy_text(mine.operation, kNameBytes, operation);
  mine.failed = local.failure().empty() ? 0 : 1;
  mine.fields = local.size();
  for (int i = 0; i < local.size(); ++i) mine.values[i] = local.value(i);
  copy_text(mine.message, kMessageBytes, local.failure());

  std::vector<Record> all(ranks);
  allgather(&mine, all.data(), static_cast<int>(sizeof(Record)), MPI_BYTE, comm);

  const std::string prefix = "linattn: distributed " + std::string(operation) + ": ";
  // The verdict depends on the gathered table only, so every rank throws the same message. A rank
  // whose checks failed is named first: it may have failed before it could build its signature (a
  // binding that could not convert its arguments reports no fields: fail_collective).
  int failed = 0;
  for (int r = 0; r < ranks; ++r) failed += all[r].failed ? 1 : 0;
  for (int r = 0; r < ranks; ++r) {
    if (!all[r].failed) continue;
    std::string others;
    if (failed > 1) others = " (and " + std::to_string(failed - 1) + " more rank(s) failed theirs)";
    throw Error(prefix + "rank " + std::to_string(r) + " failed its local checks" + others + ": " + all[r].message);
  }
  for (int r = 0; r < ranks; ++r) {
    if (std::string_view(all[r].operation) != std::string_view(all[0].operation) || all[r].fields != all[0].fields) {
      throw Error(prefix + "rank " + std::to_string(r) + " called " + all[r].operation + " with " +
                  std::to_string(all[r].fields) + " signature fields, rank 0 called " + all[0].operation + " with " +
                  std::to_string(all[0].fields) + " (every rank must make the same call)");
    }
  }
  for (int r = 1; r < ranks; ++r) {
    for (int i = 0; i < local.size(); ++i) {
      if (local.is_shared(i) && all[r].values[i] != all[0].values[i]) {
        throw Error(prefix + "rank " + std::to_string(r) + "'s " + local.name(i) + " is " +
                    std::to_string(all[r].values[i]) + ", rank 0's is " + std::to_string(all[0].values[i]) +
                    " (every rank must agree)");
      }
    }
  }
  Agreement table(ranks, local.size());
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < local.size(); ++i) table.value(r, i) = all[r].values[i];
  }
  return table;
}

}  // namespace linattn::distributed::detail

namespace linattn::distributed {

void fail_collective(MPI_Comm comm, std::string_view operation, std::string_view message) {
  detail::ErrorsReturn guard(comm);
  detail::Signature failed;
  failed.fail(std::string(message));
  detail::agree(comm, operation, failed);  // throws on every rank: this one failed
  throw Error("linattn: internal: fail_collective's agreement did not fail");
}

}  // namespace linattn::distributed
