// common/buffer.h
// An owning byte buffer aligned for O_DIRECT (4 KiB by default). RPC payloads
// land in these so the storage engine can hand them to the disk unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

namespace weft {

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

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace weft
