#pragma once
// The MPI calls of linattn_mpi, each checked (an error becomes MpiError), timed and counted into
// CommStats by the rule of include/linattn/distributed/comm.hpp: the bytes a rank passes as its send
// buffer, once per call.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <utility>

#include "linattn/distributed/comm.hpp"

namespace linattn::distributed::detail {

// Sets MPI_ERRORS_RETURN on comm for its lifetime and restores the handler it found, so that a
// failed call returns to us (and becomes an MpiError) without changing the caller's communicator.
class ErrorsReturn {
 public:
  explicit ErrorsReturn(MPI_Comm comm);
  ~ErrorsReturn();
  ErrorsReturn(const ErrorsReturn&) = delete;
  ErrorsReturn& operator=(const ErrorsReturn&) = delete;

 private:
  MPI_Comm comm_;
  MPI_Errhandler previous_ = MPI_ERRHANDLER_NULL;
};

// Throws MpiError naming call, this rank and MPI's error string unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call, MPI_Comm comm);
int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);
// count elements of datatype: the bytes they occupy (MPI_Type_size × count).
int64_t type_bytes(MPI_Datatype datatype, int64_t count);
// A count for MPI's int arguments; throws linattn::Error past INT_MAX.
int mpi_count(int64_t count, const char* what);

// The collectives and point-to-point calls, counted and timed.
void allgather(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Comm comm);
void allreduce(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
void exscan(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
void scan(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);

// The exclusive scan of the causal families: recv on rank r ← send_0 ∘ … ∘ send_{r−1} (op applied as
// MPI_Reduce_local does, inout ← in ∘ inout; recv undefined on rank 0). By recursive doubling over
// MPI_Sendrecv: ⌈log₂ P⌉ rounds, each a send of the whole payload, in a fixed order for a given P
// (deterministic for any op, commutative or not). Debian's OpenMPI 4.1 runs MPI_Exscan as a linear
// chain (P − 1 sequential steps) unless told otherwise; LINATTN_MPI_SCAN=exscan in the environment
// makes this call MPI_Exscan instead (then counted once, as any collective).
void exclusive_scan(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
void reduce(const void* send, void* recv, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm);
void bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
void sendrecv(const void* send, int send_count, int dest, void* recv, int recv_count, int source, MPI_Datatype datatype,
              int tag, MPI_Comm comm);

// A point-to-point exchange left in flight while the caller computes (ring attention's next k/v shard
// arriving during this step's blocks): MPI_Irecv from source and MPI_Isend to dest when made, the bytes
// counted then, as sendrecv counts them; wait() completes both, its time counted as communication.
// progress() lets MPI move the messages on between blocks (MPI_Testall; Open MPI has no progress
// thread). Until wait() returns, send may only be read and recv not touched. Destroyed without a
// wait (an exception on the way), it waits, ignoring errors, so that no request outlives its buffers.
class Transfer {
 public:
  Transfer(const void* send, int send_count, int dest, void* recv, int recv_count, int source, MPI_Datatype datatype,
           int tag, MPI_Comm comm);
  ~Transfer();
  Transfer(const Transfer&) = delete;
  Transfer& operator=(const Transfer&) = delete;
  void progress();
  void wait();

 private:
  MPI_Comm comm_;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool waited_ = false;
};

// Adds the wall time of its lifetime to CommStats::compute_seconds.
class ComputeTimer {
 public:
  ComputeTimer() : start_(MPI_Wtime()) {}
  ~ComputeTimer();
  ComputeTimer(const ComputeTimer&) = delete;
  ComputeTimer& operator=(const ComputeTimer&) = delete;

 private:
  double start_;
};

// Prints "linattn: rank r: op: <what>" to stderr and aborts the job (MPI_Abort on comm, code 1):
// for a failure after the agreement, when the other ranks already wait in a collective.
[[noreturn]] void abort_job(MPI_Comm comm, const char* op, const char* what);

// Runs f(); an exception from it ends the job through abort_job instead of leaving the other ranks
// waiting forever.
template <class F>
void or_abort(MPI_Comm comm, const char* op, F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const std::exception& e) {
    abort_job(comm, op, e.what());
  } catch (...) {
    abort_job(comm, op, "an exception that is not a std::exception");
  }
}

}  // namespace linattn::distributed::detail
