#include "distributed/scan_ops.hpp"

#include <vector>

#include "distributed/mpi_calls.hpp"

namespace linattn::distributed::detail {

namespace {

// The attribute key of ItemType's dims, created on first use.
int dims_key() {
  static int key = [] {
    int k = MPI_KEYVAL_INVALID;
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &k, nullptr);
    return k;
  }();
  return key;
}

// K and V of an ItemType (the operators run only on ItemTypes).
void item_dims(MPI_Datatype* type, int64_t& K, int64_t& V) {
  void* value = nullptr;
  int found = 0;
  MPI_Type_get_attr(*type, dims_key(), &value, &found);
  if (!found) MPI_Abort(MPI_COMM_WORLD, 2);  // an operator misused inside linattn: no way to report it
  const int64_t* dims = static_cast<const int64_t*>(value);
  K = dims[0];
  V = dims[1];
}

// y ← x + y.
void add(void* in, void* inout, int* len, MPI_Datatype*) {
  const float* x = static_cast<const float*>(in);
  float* y = static_cast<float*>(inout);
  for (int i = 0; i < *len; ++i) y[i] = x[i] + y[i];
}

// (a_y, S_y) ← (a_x ⊙ a_y, diag(a_y) S_x + S_y), per item.
void diagonal(void* in, void* inout, int* len, MPI_Datatype* type) {
  int64_t K = 0, V = 0;
  item_dims(type, K, V);
  const int64_t item = K + K * V;
  for (int i = 0; i < *len; ++i) {
    const float* ax = static_cast<const float*>(in) + i * item;
    float* ay = static_cast<float*>(inout) + i * item;
    const float* Sx = ax + K;
    float* Sy = ay + K;
    for (int64_t r = 0; r < K; ++r) {
      for (int64_t c = 0; c < V; ++c) Sy[r * V + c] += ay[r] * Sx[r * V + c];
      ay[r] *= ax[r];
    }
  }
}

// (A_y, S_y) ← (A_y A_x, A_y S_x + S_y), per item.
void matrix(void* in, void* inout, int* len, MPI_Datatype* type) {
  int64_t K = 0, V = 0;
  item_dims(type, K, V);
  const int64_t item = K * K + K * V;
  std::vector<float> A(size_t(K * K)), S(size_t(K * V));
  for (int i = 0; i < *len; ++i) {
    const float* Ax = static_cast<const float*>(in) + i * item;
    float* Ay = static_cast<float*>(inout) + i * item;
    const float* Sx = Ax + K * K;
    float* Sy = Ay + K * K;
    // Each entry one chain over j ascending: the order is fixed.
    for (int64_t r = 0; r < K; ++r) {
      for (int64_t c = 0; c < K; ++c) A[r * K + c] = 0;
      for (int64_t c = 0; c < V; ++c) S[r * V + c] = Sy[r * V + c];
      for (int64_t j = 0; j < K; ++j) {
        const float a = Ay[r * K + j];
        for (int64_t c = 0; c < K; ++c) A[r * K + c] += a * Ax[j * K + c];
        for (int64_t c = 0; c < V; ++c) S[r * V + c] += a * Sx[j * V + c];
      }
    }
    std::copy(A.begin(), A.end(), Ay);
    std::copy(S.begin(), S.end(), Sy);
  }
}

MPI_Op make_op(MPI_User_function* f) {
  MPI_Op op = MPI_OP_NULL;
  check_mpi(MPI_Op_create(f, /*commute=*/0, &op), "MPI_Op_create", MPI_COMM_WORLD);
  return op;
}

int reversed_key() {
  static int key = [] {
    int k = MPI_KEYVAL_INVALID;
    MPI_Comm_create_keyval(
        MPI_COMM_NULL_COPY_FN,
        [](MPI_Comm, int, void* value, void*) {
          MPI_Comm* reversed_comm = static_cast<MPI_Comm*>(value);
          MPI_Comm_free(reversed_comm);
          delete reversed_comm;
          return MPI_SUCCESS;
        },
        &k, nullptr);
    return k;
  }();
  return key;
}

}  // namespace

MPI_Op add_op() {
  static MPI_Op op = make_op(add);
  return op;
}
MPI_Op diagonal_op() {
  static MPI_Op op = make_op(diagonal);
  return op;
}
MPI_Op matrix_op() {
  static MPI_Op op = make_op(matrix);
  return op;
}

ItemType::ItemType(Kind kind, int64_t K, int64_t V)
    : dims_{K, V}, floats_(kind == Kind::diagonal ? K + K * V : K * K + K * V) {
  check_mpi(MPI_Type_contiguous(mpi_count(floats_, "one scan item"), MPI_FLOAT, &type_), "MPI_Type_contiguous",
            MPI_COMM_WORLD);
  check_mpi(MPI_Type_commit(&type_), "MPI_Type_commit", MPI_COMM_WORLD);
  check_mpi(MPI_Type_set_attr(type_, dims_key(), dims_), "MPI_Type_set_attr", MPI_COMM_WORLD);
}

ItemType::~ItemType() {
  if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
}

MPI_Comm reversed(MPI_Comm comm) {
  void* value = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(comm, reversed_key(), &value, &found), "MPI_Comm_get_attr", comm);
  if (found) return *static_cast<MPI_Comm*>(value);
  auto* reversed_comm = new MPI_Comm(MPI_COMM_NULL);
  const int rank = comm_rank(comm), size = comm_size(comm);
  check_mpi(MPI_Comm_split(comm, 0, size - 1 - rank, reversed_comm), "MPI_Comm_split", comm);
  MPI_Comm_set_errhandler(*reversed_comm, MPI_ERRORS_RETURN);
  check_mpi(MPI_Comm_set_attr(comm, reversed_key(), reversed_comm), "MPI_Comm_set_attr", comm);
  return *reversed_comm;
}

}  // namespace linattn::distributed::detail
