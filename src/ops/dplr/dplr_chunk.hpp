#pragma once
// One chunk of the DPLR delta rule's chunked forward (the WY form). For a chunk of n tokens entering with
// state S, g_t the cumulative log decays per key column (relative to the chunk's start, inclusive of token
// t; g_{−1} = 0), m a midpoint of each column's g over the chunk, and Q = scale·q:
//   u_t = a_tᵀ S_{t−1} (token t's low-rank read, a row of V values) satisfies, for the chunk's rows U,
//     (I − A_ab) U = (A ⊙ e^{g_{t−1}}) S + A_ak V,   A_ab = strict_lower(Al Brᵀ), A_ak = strict_lower(Al Krᵀ)
//   O = (Q ⊙ e^{g}) S + lower(Ql Brᵀ) U + lower(Ql Krᵀ) V
//   S ← diag(e^{g_n}) S + (B ⊙ e^{g_n − g})ᵀ U + (K ⊙ e^{g_n − g})ᵀ V
// with the sides split around m so that every factor e^{g_t − g_s} is a product of two halves within
// e^{±kMaxLogSpan/2}: Al = A ⊙ e^{g_{t−1} − m}, Ql = Q ⊙ e^{g − m}, Br = B ⊙ e^{m − g}, Kr = K ⊙ e^{m − g}.
// A chunk ends early where a column's g would span more than kMaxLogSpan, counting the chunk's start
// (g_{−1} = 0), the decayed family's and the delta rule's policy (docs/rwkv7.md, "Numerics").
#include <cstdint>
#include <vector>

#include "linattn/view.hpp"
#include "ops/dplr/dplr_checks.hpp"

namespace linattn::detail {

// One (sequence, head)'s inputs: batch row `b` of each, head `h`.
struct DplrHead {
  ConstTensorView q, k, v, a, b, gk;
  int64_t batch, h;
};

// The scratch of one thread: chunks of up to C tokens of one head at a time.
class DplrChunk {
 public:
  DplrChunk(const DplrProblem& p, int64_t chunk_size);

  // Reads tokens [t0, t0 + n) of head x, as many as the chunk and the span policy take up to `end`;
  // returns n. Forms the split sides, the four score triangles and the inverse (I − A_ab)⁻¹.
  int64_t load(const DplrHead& x, int64_t t0, int64_t end);
  // S: [K, Vp] (the state before the chunk, then after it); writes the chunk's rows of out.
  void forward(float* S, TensorView out, const DplrHead& x, int64_t t0);

  int64_t Vp() const { return Vp_; }

 private:
  const DplrProblem& p_;
  int64_t C_, Cp_, Kp_, Vp_, n_ = 0;
  std::vector<float> Q_, K_, A_, B_, g_;                     // packed rows [C, Kp]; g: running log decays
  std::vector<float> lo_, hi_, mid_, gn_, em_, enm_, zero_;  // per column [Kp]
  std::vector<float> Ql_, Qe_, Br_, Kr_, Al_, Ae_;           // the split sides [C, Kp] (Al, Ae: [C + 1, Kp])
  std::vector<float> BKd_;                                   // [Bd; Kd]: [2n, Kp]
  std::vector<float> UV_, R_, O_;                            // [U; V]: [2n, Vp]; R, O: [C, Vp]
  std::vector<float> BrT_, KrT_;                             // Brᵀ, Krᵀ [Kp, Cp]
  std::vector<float> Aab_, Aak_, Pqb_, Pqk_, T_;             // [C, Cp]: the score triangles, (I − A_ab)⁻¹
};

}  // namespace linattn::detail
