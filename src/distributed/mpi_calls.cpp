#include "distributed/mpi_calls.hpp"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "linattn/error.hpp"

namespace linattn::distributed {

namespace {
CommStats g_stats;
}

CommStats comm_stats() { return g_stats; }
void reset_comm_stats() { g_stats = {}; }

namespace detail {

ErrorsReturn::ErrorsReturn(MPI_Comm comm) : comm_(comm) {
  check_mpi(MPI_Comm_get_errhandler(comm_, &previous_), "MPI_Comm_get_errhandler", comm_);
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", comm_);
}

ErrorsReturn::~ErrorsReturn() {
  if (previous_ != MPI_ERRHANDLER_NULL) {
    MPI_Comm_set_errhandler(comm_, previous_);
    MPI_Errhandler_free(&previous_);
  }
}

void check_mpi(int rc, const char* call, MPI_Comm comm) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  int rank = -1;
  MPI_Comm_rank(comm, &rank);
  throw MpiError("linattn: " + std::string(call) + " failed on rank " + std::to_string(rank) + ": " +
                 std::string(text, static_cast<size_t>(length)));
}

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", comm);
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size", comm);
  return size;
}

int64_t type_bytes(MPI_Datatype datatype, int64_t count) {
  int size = 0;
  MPI_Type_size(datatype, &size);
  return static_cast<int64_t>(size) * count;
}

int mpi_count(int64_t count, const char* what) {
  if (count < 0 || count > INT_MAX) {
    throw Error("linattn: " + std::string(what) + " is " + std::to_string(count) + " elements, expected at most " +
                std::to_string(INT_MAX) + " (one MPI message)");
  }
  return static_cast<int>(count);
}

namespace {
// Times one MPI call and counts its bytes.
class Counted {
 public:
  explicit Counted(int64_t bytes) : start_(MPI_Wtime()) {
    g_stats.bytes_sent += bytes;
    ++g_stats.calls;
  }
  ~Counted() { g_stats.comm_seconds += MPI_Wtime() - start_; }

 private:
  double start_;
};
}  // namespace

void allgather(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Comm comm) {
  Counted counted(type_bytes(datatype, count));
  check_mpi(MPI_Allgather(send, count, datatype, recv, count, datatype, comm), "MPI_Allgather", comm);
}

void allreduce(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  Counted counted(type_bytes(datatype, count));
  check_mpi(MPI_Allreduce(send, recv, count, datatype, op, comm), "MPI_Allreduce", comm);
}

void exscan(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  Counted counted(type_bytes(datatype, count));
  check_mpi(MPI_Exscan(send, recv, count, datatype, op, comm), "MPI_Exscan", comm);
}

void scan(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  Counted counted(type_bytes(datatype, count));
  check_mpi(MPI_Scan(send, recv, count, datatype, op, comm), "MPI_Scan", comm);
}

void exclusive_scan(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  const char* choice = std::getenv("LINATTN_MPI_SCAN");
  if (choice && std::string_view(choice) == "exscan") {
    exscan(send, recv, count, datatype, op, comm);
    return;
  }
  const int rank = comm_rank(comm), size = comm_size(comm);
  const size_t bytes = size_t(type_bytes(datatype, count));
  // partial: the reduction of this rank's aligned block of ranks (of the current size) seen so far;
  // recv: that of the ranks below this one, once any arrived.
  std::vector<unsigned char> partial(static_cast<const unsigned char*>(send),
                                     static_cast<const unsigned char*>(send) + bytes),
      incoming(bytes);
  bool have = false;
  for (int mask = 1; mask < size; mask <<= 1) {
    const int partner = rank ^ mask;
    if (partner >= size) continue;
    sendrecv(partial.data(), count, partner, incoming.data(), count, partner, datatype, /*tag=*/7401, comm);
    if (partner < rank) {
      // incoming covers lower ranks: it goes first.
      check_mpi(MPI_Reduce_local(incoming.data(), partial.data(), count, datatype, op), "MPI_Reduce_local", comm);
      if (have) {
        check_mpi(MPI_Reduce_local(incoming.data(), recv, count, datatype, op), "MPI_Reduce_local", comm);
      } else {
        std::memcpy(recv, incoming.data(), bytes);
        have = true;
      }
    } else {
      // incoming covers higher ranks: partial ← partial ∘ incoming.
      check_mpi(MPI_Reduce_local(partial.data(), incoming.data(), count, datatype, op), "MPI_Reduce_local", comm);
      partial.swap(incoming);
    }
  }
}

void reduce(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm) {
  Counted counted(type_bytes(datatype, count));
  check_mpi(MPI_Reduce(send, recv, count, datatype, op, root, comm), "MPI_Reduce", comm);
}

void bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  // Only the root sends.
  Counted counted(comm_rank(comm) == root ? type_bytes(datatype, count) : 0);
  check_mpi(MPI_Bcast(buffer, count, datatype, root, comm), "MPI_Bcast", comm);
}

void sendrecv(const void* send, int send_count, int dest, void* recv, int recv_count, int source, MPI_Datatype datatype,
              int tag, MPI_Comm comm) {
  Counted counted(dest == MPI_PROC_NULL ? 0 : type_bytes(datatype, send_count));
  check_mpi(MPI_Sendrecv(send, send_count, datatype, dest, tag, recv, recv_count, datatype, source, tag, comm,
                         MPI_STATUS_IGNORE),
            "MPI_Sendrecv", comm);
}

Transfer::Transfer(const void* send, int send_count, int dest, void* recv, int recv_count, int source,
                   MPI_Datatype datatype, int tag, MPI_Comm comm)
    : comm_(comm) {
  Counted counted(dest == MPI_PROC_NULL ? 0 : type_bytes(datatype, send_count));
  // The receive first, so that the matching send from the previous rank can land straight in it.
  check_mpi(MPI_Irecv(recv, recv_count, datatype, source, tag, comm, &requests_[0]), "MPI_Irecv", comm);
  check_mpi(MPI_Isend(send, send_count, datatype, dest, tag, comm, &requests_[1]), "MPI_Isend", comm);
}

Transfer::~Transfer() {
  if (!waited_) MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
}

void Transfer::progress() {
  if (waited_) return;
  int done = 0;
  const double start = MPI_Wtime();
  const int rc = MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE);
  g_stats.comm_seconds += MPI_Wtime() - start;
  check_mpi(rc, "MPI_Testall", comm_);
}

void Transfer::wait() {
  if (waited_) return;
  waited_ = true;
  const double start = MPI_Wtime();  // the transfer's one call was counted when it started
  const int rc = MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
  g_stats.comm_seconds += MPI_Wtime() - start;
  check_mpi(rc, "MPI_Waitall", comm_);
}

ComputeTimer::~ComputeTimer() { g_stats.compute_seconds += MPI_Wtime() - start_; }

void abort_job(MPI_Comm comm, const char* op, const char* what) {
  int rank = -1;
  MPI_Comm_rank(comm, &rank);
  std::fprintf(stderr, "linattn: rank %d: %s: %s (aborting the job: the other ranks wait in a collective)\n", rank, op,
               what);
  std::fflush(stderr);
  MPI_Abort(comm, 1);
  std::abort();
}

}  // namespace detail
}  // namespace linattn::distributed
