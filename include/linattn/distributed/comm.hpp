#pragma once
// What every sequence-parallel operator of linattn_mpi shares: its errors and its traffic counters.
//
// Each rank holds a contiguous shard [B, n_r, H, D] of the sequence (n_r may differ between ranks,
// and may be 0); the operators take the communicator whose ranks, in rank order, hold the shards in
// sequence order. MPI must be initialised (MPI_THREAD_FUNNELED suffices: only the calling thread
// talks to MPI). During a call the communicator's error handler is MPI_ERRORS_RETURN (restored on
// return), so that an MPI failure becomes an MpiError rather than an abort inside MPI.
//
// Failures never hang: before any arithmetic every rank publishes its shape signature and the
// outcome of its local argument checks (one MPI_Allgather), so a shape that disagrees between ranks,
// or a bad argument on one rank, makes every rank throw linattn::Error naming that rank. A failure
// after that point (an exception in a rank's local pass) calls MPI_Abort after printing the rank and
// the message to stderr: the other ranks are inside a collective by then and can only be ended.
//
// Byte counting (CommStats::bytes_sent): each rank counts the bytes it passes as its send buffer to
// each MPI call, count × type size, once per call: an MPI_Allreduce of n bytes counts n, an
// MPI_Allgather counts its own n (not P·n), a point-to-point send (MPI_Sendrecv) its message. The
// causal scans are recursive doubling over MPI_Sendrecv, so they count what goes on the wire: the
// payload once per round in which the rank has a partner (⌈log₂ P⌉ rounds at most). The traffic
// inside a collective (an Allreduce's reduce-scatter and allgather, say) is MPI's algorithm and is
// not counted: the bytes here are what the operator hands to MPI, per rank and call.
#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace linattn::distributed {

// An MPI call that returned an error (the message names the call, the rank and MPI's error string).
class MpiError : public std::runtime_error {
 public:
  explicit MpiError(const std::string& what) : std::runtime_error(what) {}
};

// This process's traffic and time inside linattn_mpi's calls since the last reset (all calls, all
// communicators; not thread-safe: call the operators from one thread).
struct CommStats {
  int64_t bytes_sent = 0;      // per the counting rule above
  int64_t calls = 0;           // MPI communication calls made (agreement included)
  double comm_seconds = 0;     // wall time inside those MPI calls (waiting for other ranks included)
  double compute_seconds = 0;  // wall time in the local passes
};
CommStats comm_stats();
void reset_comm_stats();

// For a caller (a language binding) whose own conversion of this rank's arguments failed before it
// could call `operation` (e.g. "decayed_attention_forward"): takes part in that call's agreement as a
// rank whose checks failed with `message`, so that every rank, the others waiting in the agreement of
// their call, throws linattn::Error naming this rank, instead of the others waiting forever. Always
// throws; collective over comm like the operation itself.
[[noreturn]] void fail_collective(MPI_Comm comm, std::string_view operation, std::string_view message);

}  // namespace linattn::distributed
