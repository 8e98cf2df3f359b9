#pragma once
// Reads typed values off a fuzzer's byte string; past the end, zeros.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cascade_rl::fuzz {

struct input {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t at = 0;

  template <class T>
  T take() {
    T v{};
    if (at + sizeof(T) <= size) std::memcpy(&v, data + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::uint8_t byte() { return take<std::uint8_t>(); }
  bool done() const { return at >= size; }
};

}  // namespace cascade_rl::fuzz
