#include "common/buffer.h"

#include <cstring>
#include <new>

#include "common/assert.h"

namespace weft {

Buffer Buffer::allocate(size_t size, size_t align) {
  Buffer b;
  size_t rounded = (size + align - 1) / align * align;
  if (rounded == 0) rounded = align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
  b.data_.reset(static_cast<std::byte*>(p));
  b.size_ = size;
  b.capacity_ = rounded;
  return b;
}

Buffer Buffer::copy_of(std::span<const std::byte> bytes) {
  Buffer b = allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

void Buffer::resize(size_t size) {
  WEFT_ASSERT(size <= capacity_);
  size_ = size;
}

}  // namespace weft
