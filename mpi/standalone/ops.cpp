// MPI_SUM, MPI_PROD, MPI_MIN and MPI_MAX over the C integer and floating types.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpi/standalone/state.hpp"

namespace gridbcast::mpi {
namespace {

template <typename T>
void kernel(MPI_Op op, void* inout, const void* in, std::uint64_t n) {
  // memcpy in and out: user buffers need not be aligned for T.
  auto* out = static_cast<std::byte*>(inout);
  const auto* src = static_cast<const std::byte*>(in);
  for (std::uint64_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, out + i * sizeof(T), sizeof(T));
    std::memcpy(&b, src + i * sizeof(T), sizeof(T));
    switch (op) {
      case MPI_SUM:
        a = static_cast<T>(a + b);
        break;
      case MPI_PROD:
        a = static_cast<T>(a * b);
        break;
      case MPI_MIN:
        a = b < a ? b : a;
        break;
      case MPI_MAX:
        a = b > a ? b : a;
        break;
      default:
        break;
    }
    std::memcpy(out + i * sizeof(T), &a, sizeof(T));
  }
}

// Calls f with a value of the C type of `base`; false for types reductions do
// not take (MPI_CHAR, MPI_BYTE, MPI_WCHAR, MPI_C_BOOL).
template <typename F>
bool with_type(MPI_Datatype base, F&& f) {
  switch (base) {
    case MPI_SIGNED_CHAR:
      f(static_cast<signed char>(0));
      return true;
    case MPI_UNSIGNED_CHAR:
      f(static_cast<unsigned char>(0));
      return true;
    case MPI_SHORT:
      f(static_cast<short>(0));
      return true;
    case MPI_UNSIGNED_SHORT:
      f(static_cast<unsigned short>(0));
      return true;
    case MPI_INT:
      f(0);
      return true;
    case MPI_UNSIGNED:
      f(0u);
      return true;
    case MPI_LONG:
      f(0L);
      return true;
    case MPI_UNSIGNED_LONG:
      f(0UL);
      return true;
    case MPI_LONG_LONG_INT:
      f(0LL);
      return true;
    case MPI_UNSIGNED_LONG_LONG:
      f(0ULL);
      return true;
    case MPI_FLOAT:
      f(0.0f);
      return true;
    case MPI_DOUBLE:
      f(0.0);
      return true;
    case MPI_LONG_DOUBLE:
      f(static_cast<long double>(0));
      return true;
    case MPI_INT8_T:
      f(std::int8_t{0});
      return true;
    case MPI_INT16_T:
      f(std::int16_t{0});
      return true;
    case MPI_INT32_T:
      f(std::int32_t{0});
      return true;
    case MPI_INT64_T:
      f(std::int64_t{0});
      return true;
    case MPI_UINT8_T:
      f(std::uint8_t{0});
      return true;
    case MPI_UINT16_T:
      f(std::uint16_t{0});
      return true;
    case MPI_UINT32_T:
      f(std::uint32_t{0});
      return true;
    case MPI_UINT64_T:
      f(std::uint64_t{0});
      return true;
    case MPI_AINT:
      f(MPI_Aint{0});
      return true;
    default:
      return false;
  }
}

}  // namespace

void check_op(MPI_Op op, MPI_Datatype base) {
  if (op != MPI_SUM && op != MPI_PROD && op != MPI_MIN && op != MPI_MAX)
    throw Error(MPI_ERR_OP, "operation " + std::to_string(op) +
                                " is not provided (MPI_SUM, MPI_PROD, MPI_MIN and MPI_MAX are)");
  if (!with_type(base, [](auto) {}))
    throw Error(MPI_ERR_OP, "reductions take C integer and floating types, not datatype " +
                                std::to_string(base));
}

void apply_op(MPI_Op op, MPI_Datatype base, void* inout, const void* in, std::uint64_t n) {
  check_op(op, base);
  with_type(base, [&](auto v) { kernel<decltype(v)>(op, inout, in, n); });
}

}  // namespace gridbcast::mpi
