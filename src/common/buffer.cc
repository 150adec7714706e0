#include "common/buffer.h"

#include <pthread.h>

#include <atomic>
#include <bit>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "common/assert.h"

namespace weft {
namespace {

constexpr int kMinClassLog2 = 16;  // 64 KiB
constexpr int kMaxClassLog2 = 27;  // 128 MiB
constexpr size_t kPoolCachedBytesMax = 256u << 20;

// Free lists of 4 KiB-aligned blocks, one per power-of-two size. Thread-safe
// and fork-safe: a fork while another thread held a class's lock (a client's
// I/O thread freeing a reply while Python forks a DataLoader worker) would
// leave it held for good in the child, so every lock is held across fork(2)
// and released on both sides (pthread_atfork; locks are taken one at a time
// elsewhere, so taking them all in order cannot deadlock).
class Pool {
 public:
  Pool() {
    instance_ = this;
    ::pthread_atfork([] { instance_->lock_all(); }, [] { instance_->unlock_all(); },
                     [] { instance_->unlock_all(); });
  }
  void* take(int cls) {
    std::lock_guard lock(mu_[cls - kMinClassLog2]);
    auto& list = free_[cls - kMinClassLog2];
    if (list.empty()) return nullptr;
    void* p = list.back();
    list.pop_back();
    cached_.fetch_sub(size_t{1} << cls, std::memory_order_relaxed);
    return p;
  }
  void give(int cls, void* p) {
    size_t bytes = size_t{1} << cls;
    if (cached_.fetch_add(bytes, std::memory_order_relaxed) + bytes > kPoolCachedBytesMax) {
      cached_.fetch_sub(bytes, std::memory_order_relaxed);
      std::free(p);
      return;
    }
    std::lock_guard lock(mu_[cls - kMinClassLog2]);
    free_[cls - kMinClassLog2].push_back(p);
  }
  size_t cached() const { return cached_.load(std::memory_order_relaxed); }
  void raise_peak(size_t now) {
    size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  void taken_out(size_t bytes) { raise_peak(held_.fetch_add(bytes, std::memory_order_relaxed) + bytes); }
  void put_back(size_t bytes) { held_.fetch_sub(bytes, std::memory_order_relaxed); }
  size_t held() const { return held_.load(std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  // A buffer taken between the load and the store may have raised the peak
  // before the store lowered it: raised again to what is held after.
  void reset_peak() {
    peak_.store(held(), std::memory_order_relaxed);
    raise_peak(held());
  }

 private:
  void lock_all() {
    for (auto& m : mu_) m.lock();
  }
  void unlock_all() {
    for (auto& m : mu_) m.unlock();
  }
  static inline Pool* instance_ = nullptr;  // the one Pool (pool()), for the fork handlers
  static constexpr int kClasses = kMaxClassLog2 - kMinClassLog2 + 1;
  std::mutex mu_[kClasses];
  std::vector<void*> free_[kClasses];
  std::atomic<size_t> cached_{0};
  std::atomic<size_t> held_{0}, peak_{0};  // pool-sized buffers out of the pool, by capacity
};

Pool& pool() {
  static auto* p = new Pool();  // never destroyed: buffers may be freed during exit
  return *p;
}

int class_of(size_t size) {
  int cls = kMinClassLog2;
  while ((size_t{1} << cls) < size) ++cls;
  return cls;
}

}  // namespace

void detail::BufferFree::operator()(std::byte* p) const {
  if (pooled_capacity != 0) {
    pool().put_back(pooled_capacity);
    pool().give(std::countr_zero(pooled_capacity), p);
  } else
    std::free(p);
}

size_t Buffer::pool_cached_bytes() { return pool().cached(); }
size_t Buffer::pooled_bytes_held() { return pool().held(); }
size_t Buffer::pooled_bytes_peak() { return pool().peak(); }
void Buffer::reset_pooled_peak() { pool().reset_peak(); }

Buffer Buffer::allocate(size_t size, size_t align) {
  Buffer b;
  if (align <= kDefaultAlign && size >= (size_t{1} << kMinClassLog2) && size <= (size_t{1} << kMaxClassLog2)) {
    int cls = class_of(size);
    size_t capacity = size_t{1} << cls;
    void* p = pool().take(cls);
    if (p == nullptr) p = std::aligned_alloc(kDefaultAlign, capacity);
    if (p == nullptr) throw std::bad_alloc();
    pool().taken_out(capacity);
    b.data_ = std::unique_ptr<std::byte, Free>(static_cast<std::byte*>(p), Free{capacity});
    b.size_ = size;
    b.capacity_ = capacity;
    return b;
  }
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
