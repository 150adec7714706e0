// client/file_impl.h
// An open file of libweft: reads straight from the storage servers, writes
// through a write-behind buffer.
// Write-behind: pwrite copies into per-chunk buffers and records the written
// extents; a chunk is sent when it is full, when the file holds more than
// kDirtyChunksMax dirty chunks, and on flush/fsync/close. Only the written
// extents are sent (so writers of disjoint ranges never overwrite each other).
// Invariants: at most one update of a given chunk is in flight from this File
// (later bytes wait for it, so updates of a chunk apply in write order); every
// chunk buffer is counted in Core::dirty at its full size (what it takes in
// memory, however few bytes were written to it) until its send is acknowledged.
// Every write is numbered (write_gen_); a dirty chunk and a send carry the
// number of their oldest write, so a flush waits for the writes made before it
// and not for those other threads make while it waits.
// A failed background write makes the File fail: the error is returned by the
// next pwrite/flush/fsync/close; the data it carried and every write still
// buffered are lost (dropped, never sent later).
// The user holds a FileHandle, which closes the File (flushing it) when
// dropped without close(); the FileImpl's own destructor closes it only if
// nothing did (a File that never reached the user).
// Threading: thread-safe (one mutex; no lock held across a wait on the network
// except the condition-variable waits).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "client/core.h"
#include "client/placement.h"
#include "common/buffer.h"

namespace weft::client {

class FileImpl final : public File, public std::enable_shared_from_this<FileImpl> {
 public:
  FileImpl(Core& core, Cred cred, Inode inode, uint64_t session_id, meta::OpenFlags access);
  ~FileImpl() override;

  Ino ino() const override { return inode_.ino; }
  Layout layout() const override { return inode_.layout; }
  uint64_t size() const override;
  Result<uint64_t> refresh_size() override;
  uint64_t unreported_end() const override;
  // The highest byte written through this File (its own writes only, not
  // meta's length at open), cut by truncates it learned of.
  uint64_t written_end() const;
  Inode opened() const override { return inode_; }
  bool readable() const override { return readable_; }
  bool writable() const override { return writable_; }
  bool failed() const override;
  Result<void> close_flushed() const override;
  Result<size_t> pread(std::span<std::byte> dst, uint64_t offset) override;
  Result<size_t> pread_page_fill(std::span<std::byte> dst, uint64_t offset) override;
  Result<size_t> pwrite(std::span<const std::byte> src, uint64_t offset) override;
  Result<void> flush() override;
  Result<void> fsync() override { return flush(); }
  Result<void> truncate(uint64_t length) override;
  Result<void> extend(uint64_t length) override;
  Result<void> close() override;

  // Closing counts as open: its writes may still be on their way (flush()
  // waits for the close).
  bool is_open() const {
    std::lock_guard lock(mu_);
    return !closed_;
  }
  // For another File's read (or a truncate): sends what this File buffered
  // and waits for the acks; reports the length only if it grew.
  void flush_before_read();
  // Sends every dirty chunk now without waiting (memory pressure).
  void send_dirty();
  // For Client: after a truncate through another path, the length is `length`.
  void truncated_to(uint64_t length);
  // For Client, on a File just made: `data` holds the first `got` bytes of
  // chunk 0, read while meta answered the open (client/early_read.h); the
  // first read takes them as read-ahead. `charged`: data's charge to
  // Core::early_reads, released when the File lets it go.
  void adopt_early_read(Buffer data, uint32_t got, size_t charged);
  // Drops what adopt_early_read gave, unless a read took it already.
  void drop_early_read();
  // For another File of this inode (the same client) about to write
  // [offset, offset + length): sends what this File buffers over that range
  // and waits until every send of it over the range is acknowledged, so the
  // later write lands last, as two descriptors of one local file order their
  // writes. Ranges this File does not hold cost nothing (disjoint writers).
  void order_before_write(uint64_t offset, uint64_t length);
  // For Client: another File of this inode wrote chunk `index`.
  void drop_read_ahead(uint64_t index);
  // The chunk of `index` (its chain from the layout).
  Result<ChunkAddress> address(uint64_t index) const;

  static constexpr size_t kDirtyChunksMax = 8;

 private:
  struct DirtyChunk {
    Buffer data;                            // chunk_bytes, allocated on first write
    std::map<uint32_t, uint32_t> extents;   // start -> end, disjoint, not adjacent
    size_t bytes = 0;                       // sum of the extents
    uint64_t first_gen = 0;                 // the oldest write it holds
  };

  // Adds [start, end) to the chunk's extents; returns the bytes newly covered.
  static size_t add_extent(DirtyChunk& chunk, uint32_t start, uint32_t end);
  // Sends chunk `index` unless it is already in flight. REQUIRES(mu_).
  void send_locked(uint64_t index);
  // Sends every dirty chunk not in flight. REQUIRES(mu_).
  void send_all_locked();
  // `charged`: the buffer size counted in Core::dirty, given back now.
  void on_sent(uint64_t index, size_t charged, Result<void> r);
  // A length report a flush owes meta: `length` covers the writes numbered up
  // to `upto`.
  struct LengthReport {
    uint64_t length = 0;
    uint64_t upto = 0;
  };
  // Sends every dirty chunk and waits until every write made before the call
  // is acknowledged (or the File failed); reports the length (for_read: only
  // if it grew, else also after writes inside it: see reported_gen_).
  Result<void> flush_locked(std::unique_lock<std::mutex>& lock, bool for_read = false);
  // flush_locked without the report: the report it owes, if any.
  Result<std::optional<LengthReport>> flush_data_locked(std::unique_lock<std::mutex>& lock, bool for_read);
  // close()'s report and the end of its session in one call to meta where
  // meta has it; else the report alone (the caller closes the session).
  // Returns the outcome and whether the session is closed.
  std::pair<Result<void>, bool> close_reporting(std::unique_lock<std::mutex>& lock, LengthReport report);
  // What a length report holds while it is on its way: OpenInode::reports
  // (shared: a truncate here comes wholly before or after it), then
  // reporting_mu_ (this File's reports go one at a time).
  struct ReportHold {
    std::shared_lock<std::shared_mutex> inode;
    std::unique_lock<std::mutex> file;
    void unlock() {
      file.unlock();
      inode.unlock();
    }
  };
  // Takes them for `report`, releasing `lock` (mu_) while it waits, and cuts
  // the report to what a truncate meanwhile left of this File's writes.
  // REQUIRES(mu_), held again on return.
  ReportHold hold_reports(std::unique_lock<std::mutex>& lock, LengthReport& report);
  // A fault point for tests: a report held on its way. No lock held.
  static void report_on_its_way();
  // Whether a write numbered <= gen is dirty / in flight. REQUIRES(mu_).
  bool dirty_upto_locked(uint64_t gen) const;
  bool in_flight_upto_locked(uint64_t gen) const;
  Result<void> check_usable_locked() const;
  // The File fails (the first error stays): what it buffers is dropped and
  // never sent. A truncate through another File may have cut where it goes
  // since, and no length would be reported for it: as after EIO on a local
  // file, bytes not written are lost, never written later. REQUIRES(mu_).
  void fail_locked(Status status);
  // The report a flush of the writes up to `upto` owes meta (none if meta has
  // it: see reported_gen_). `end`: of the writes since the last report. REQUIRES(mu_).
  std::optional<LengthReport> report_owed_locked(uint64_t end, uint64_t upto, bool for_read) const;
  // kIoError where a test injects a lost length report (client.report_length.lost).
  Result<void> report_may_reach_meta() const;
  // Sends `report` to meta. REQUIRES(mu_), released meanwhile.
  Result<void> report_length(std::unique_lock<std::mutex>& lock, LengthReport report);
  // One length report (close: close_with_length), and the answer to every
  // truncate by another client meta caps it for (client/truncate.h
  // stored_end). `probe_from`: cut_to_probe_'s, looked at before the first
  // send. `length` becomes what was reported last; the answered cut's
  // length, if any, goes to `answered`. Holds a ReportHold; not mu_.
  Result<meta::LengthReply> send_report(uint64_t& length, bool close, std::optional<uint64_t> probe_from,
                                        std::optional<uint64_t>& answered);
  // report_length()/close_reporting()'s: sends `report` (with
  // cut_to_probe_) with mu_ released, then records what meta took.
  // REQUIRES(mu_) and `hold`.
  Result<meta::LengthReply> send_and_record(std::unique_lock<std::mutex>& lock, LengthReport& report, bool close);
  // Meta took `report` and answered with `meta_size`; `probed`: the report
  // looked at storage (send_report), `answered`: as send_report's. REQUIRES(mu_).
  void reported_locked(const LengthReport& report, uint64_t meta_size, bool probed, std::optional<uint64_t> answered);
  // pwrite's work, under OpenInode::cut held shared.
  Result<size_t> write_at(std::span<const std::byte> src, uint64_t offset);

  Core& core_;
  const Cred cred_;
  const Inode inode_;
  const uint64_t session_id_;
  const bool readable_;
  const bool writable_;
  std::vector<mgmt::ChainId> stripe_;  // set at open
  std::shared_ptr<OpenInode> shared_;  // set at open
  std::atomic<bool> append_{false};    // O_APPEND, set at open

  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t size_ = 0;          // GUARDED_BY(mu_)
  uint64_t written_end_ = 0;   // GUARDED_BY(mu_): highest byte written through this File
  uint64_t reported_ = 0;      // GUARDED_BY(mu_): length last reported to meta
  std::map<uint64_t, DirtyChunk> dirty_;  // GUARDED_BY(mu_)
  struct InFlight {
    uint64_t first_gen = 0;                // the oldest write the send carries
    std::map<uint32_t, uint32_t> extents;  // what it writes (DirtyChunk::extents)
  };
  std::map<uint64_t, InFlight> in_flight_;  // GUARDED_BY(mu_): chunk index -> its send
  uint64_t write_gen_ = 0;                // GUARDED_BY(mu_): writes so far
  // GUARDED_BY(mu_): the newest write a flush waits for; a chunk holding one
  // that is older is sent again as soon as its previous send completes.
  uint64_t flush_upto_ = 0;
  std::optional<Status> failed_;          // GUARDED_BY(mu_)
  bool closing_ = false;                  // GUARDED_BY(mu_): close() began: no more reads or writes
  bool closed_ = false;                   // GUARDED_BY(mu_)
  // GUARDED_BY(mu_): what close()'s flush returned, for flush() callers that
  // waited for that close.
  Result<void> close_flushed_;
  uint64_t next_read_ = UINT64_MAX;       // GUARDED_BY(mu_): end of the previous read (sequential detection)
  // GUARDED_BY(mu_): write_gen_ when the length was last reported; a flush
  // with newer writes reports even a length meta already has (another
  // client may have cut the file under it since, and the write updates mtime).
  uint64_t reported_gen_ = 0;
  // truncated_to calls; changed under mu_, read without it too (pread_page_fill).
  std::atomic<uint64_t> truncated_gen_{0};
  uint64_t unreported_end_ = 0;  // GUARDED_BY(mu_): end of the writes since the last report
  std::mutex reporting_mu_;      // see ReportHold
  // GUARDED_BY(mu_), changed under reporting_mu_: a truncate by another
  // client to this length that this File answered while it had writes the answering
  // report did not cover; the truncate may have removed those too, and this
  // File's ends still count what it removed. Every report past it looks
  // at storage first, until one finds nothing written meanwhile (and lowers
  // the ends: reported_locked).
  std::optional<uint64_t> cut_to_probe_;
  // Remembers a truncate to `cut` a report answered (or may have: its reply
  // was lost) while this File had writes the report did not cover. REQUIRES(mu_).
  void remember_cut_locked(uint64_t cut);

  // Read-ahead: once reads are sequential, whole chunks from the one being
  // read onwards are fetched ahead (window doubling from 2 chunks up to
  // readahead_bytes_max). Own writes drop the affected chunks. A running
  // stream tolerates reads up to kReorderChunks chunks around its end.
  static constexpr uint64_t kReorderChunks = 4;
  struct Prefetch {
    explicit Prefetch(ByteBudget& b, size_t n) : budget(b), charged(n) {}
    ~Prefetch() { budget.release(charged); }
    Prefetch(const Prefetch&) = delete;
    Prefetch& operator=(const Prefetch&) = delete;
    ByteBudget& budget;  // Core::readahead (early_reads: adopt_early_read), charged until the last holder lets go
    const size_t charged;
    Buffer data;
    bool done = false;  // GUARDED_BY(FileImpl::mu_)
    Result<uint32_t> got = 0u;
  };
  std::map<uint64_t, std::shared_ptr<Prefetch>> prefetched_;  // GUARDED_BY(mu_)
  uint32_t ra_window_ = 0;                                    // GUARDED_BY(mu_): chunks
  void prefetch_locked(uint64_t first_chunk, uint64_t size);
  // Reads [offset, offset + want) into dst, from prefetched chunks where it
  // can. Holes read as zeros; when it met one it asked meta
  // (check_not_removed), and returns the length meta gave.
  Result<std::optional<uint64_t>> read_spans(std::span<std::byte> dst, uint64_t offset, size_t want);
  Result<void> read_direct(std::span<const ChunkSpan> spans, std::span<const size_t> which, std::span<std::byte> dst,
                           std::vector<uint32_t>& got);
  // After a chunk came back shorter than the File's length says: meta's
  // length for a hole, kStaleHandle if meta no longer has the file.
  Result<uint64_t> check_not_removed();
  // Where this File's writes, reports and truncates were when an ask of
  // meta's length began.
  struct Gens {
    uint64_t write = 0, reported = 0, truncated = 0;
    bool operator==(const Gens&) const = default;
  };
  Gens gens_locked() const { return {write_gen_, reported_gen_, truncated_gen_}; }
  // Takes a length meta gave for an ask that began at `asked`: a shorter one
  // than this File knows, with nothing here meta lacks and nothing written,
  // reported or truncated meanwhile, means another client cut the file; a
  // longer one counts unless a truncate here came after the ask (it is
  // older than that truncate).
  void learn_meta_size_locked(uint64_t meta_size, Gens asked);
  // One chunk range read on the calling thread (not an I/O thread), then through read() if that failed.
  Result<uint32_t> read_chunk_here(ChunkAddress address, uint32_t offset, std::span<std::byte> dst);
 public:
  // Set by Client at open: stripe chains of this file.
  void set_stripe(std::vector<mgmt::ChainId> stripe) { stripe_ = std::move(stripe); }
  // Set by Client at open, before the File is shared.
  void set_shared(std::shared_ptr<OpenInode> shared) { shared_ = std::move(shared); }
  // O_APPEND: every pwrite ignores its offset and writes at the end of the
  // file as this client knows it (Core::local_size: meta's length when each
  // File opened, grown by every write here). Appends of other clients are
  // not ordered with these (as NFS).
  void set_append() { append_ = true; }
  void set_size(uint64_t size) {
    std::lock_guard lock(mu_);
    size_ = size;
    reported_ = size;
  }
};

// What Client::open/create hand out: the File, closed when the user drops
// the last reference without close(). The close runs while the FileImpl is
// still alive and listed among its inode's open Files (weakly: a File whose
// last reference went is not), so its flush stays ordered with its siblings'
// truncates, writes and reads. A FileImpl's own last reference may go with
// a send's completion, long after the user let go: closing there, it was
// invisible to its siblings.
class FileHandle final : public File {
 public:
  explicit FileHandle(std::shared_ptr<FileImpl> impl) : impl_(std::move(impl)) {}
  ~FileHandle() override;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;

  Ino ino() const override { return impl_->ino(); }
  Layout layout() const override { return impl_->layout(); }
  uint64_t size() const override { return impl_->size(); }
  Result<uint64_t> refresh_size() override { return impl_->refresh_size(); }
  uint64_t unreported_end() const override { return impl_->unreported_end(); }
  Inode opened() const override { return impl_->opened(); }
  bool readable() const override { return impl_->readable(); }
  bool writable() const override { return impl_->writable(); }
  bool failed() const override { return impl_->failed(); }
  Result<size_t> pread(std::span<std::byte> dst, uint64_t offset) override { return impl_->pread(dst, offset); }
  Result<size_t> pread_page_fill(std::span<std::byte> dst, uint64_t offset) override {
    return impl_->pread_page_fill(dst, offset);
  }
  Result<size_t> pwrite(std::span<const std::byte> src, uint64_t offset) override {
    return impl_->pwrite(src, offset);
  }
  Result<void> flush() override { return impl_->flush(); }
  Result<void> fsync() override { return impl_->fsync(); }
  Result<void> truncate(uint64_t length) override { return impl_->truncate(length); }
  Result<void> extend(uint64_t length) override { return impl_->extend(length); }
  Result<void> close() override { return impl_->close(); }
  Result<void> close_flushed() const override { return impl_->close_flushed(); }

 private:
  const std::shared_ptr<FileImpl> impl_;
};

}  // namespace weft::client
