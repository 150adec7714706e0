// common/buffer.h
// An owning byte buffer aligned for O_DIRECT (4 KiB by default). RPC payloads
// land in these so the storage engine can hand them to the disk unchanged.
// Buffers of 64 KiB and more come from a process-wide pool of power-of-two
// sizes (bounded: at most 256 MiB kept), because fresh memory costs a page
// fault per 4 KiB, which on virtual machines is slower than the network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

namespace weft {

namespace detail {
struct BufferFree {
  size_t pooled_capacity = 0;  // non-zero: return to the pool
  void operator()(std::byte* p) const;
};
}  // namespace detail

class Buffer {
 public:
  static constexpr size_t kDefaultAlign = 4096;

  Buffer() = default;
  // Contents are uninitialised.
  static Buffer allocate(size_t size, size_t align = kDefaultAlign);
  static Buffer copy_of(std::span<const std::byte> bytes);

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> span() { return {data(), size_}; }
  std::span<const std::byte> span() const { return {data(), size_}; }
  // Shrinks (or grows up to capacity) without reallocating.
  void resize(size_t size);

  // Bytes currently cached by the pool (for metrics and tests).
  static size_t pool_cached_bytes();
  // Bytes of pool-sized buffers (64 KiB to 128 MiB, counted by capacity)
  // held by the process now, and the most held at once since the last
  // reset_pooled_peak(): what a bounded operation held, whatever the pool or
  // the heap already had (resident memory cannot tell these apart).
  static size_t pooled_bytes_held();
  static size_t pooled_bytes_peak();
  static void reset_pooled_peak();

 private:
  using Free = detail::BufferFree;
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace weft
