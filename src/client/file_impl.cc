#include "client/file_impl.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "client/placement.h"
#include "client/truncate.h"
#include "common/fault.h"
#include "common/logging.h"

namespace weft::client {

namespace {

// The coroutine that sends one chunk's extents; owns the buffer until done.
Task<Result<void>> send_chunk(ChunkIo& io, ChunkAddress address, Buffer data, std::map<uint32_t, uint32_t> extents) {
  for (const auto& extent : extents) {
    std::span<const std::byte> bytes(data.data() + extent.first, extent.second - extent.first);
    auto r = co_await io.write(address, extent.first, bytes);
    if (!r) co_return r;
  }
  co_return Result<void>{};
}

}  // namespace

FileImpl::FileImpl(Core& core, Cred cred, Inode inode, uint64_t session_id, meta::OpenFlags access)
    : core_(core),
      cred_(std::move(cred)),
      inode_(std::move(inode)),
      session_id_(session_id),
      readable_(access.read),
      writable_(access.write) {
  size_ = reported_ = inode_.size;
}

FileImpl::~FileImpl() {
  bool open;
  {
    std::lock_guard lock(mu_);
    open = !closed_;
  }
  if (open) {
    if (auto r = close(); !r) WEFT_LOG_WARN("closing file {} on release: {}", inode_.ino, r.error());
  }
}

FileHandle::~FileHandle() {
  if (!impl_->is_open()) return;
  if (auto r = impl_->close(); !r) WEFT_LOG_WARN("closing file {} on release: {}", impl_->ino(), r.error());
}

uint64_t FileImpl::size() const {
  std::lock_guard lock(mu_);
  return size_;
}

uint64_t FileImpl::unreported_end() const {
  std::lock_guard lock(mu_);
  // unreported_end_ outlives a report that covered only older writes (later
  // ones keep it): past written_end_ it names nothing still written here.
  // A failed File reports nothing more: its unreported writes were dropped
  // (or their outcome is unknown), and its siblings must not count them.
  return writable_ && !failed_ ? std::min(unreported_end_, written_end_) : 0;
}

uint64_t FileImpl::written_end() const {
  std::lock_guard lock(mu_);
  return failed_ ? std::min(written_end_, reported_) : written_end_;  // as unreported_end()
}

Result<uint64_t> FileImpl::refresh_size() {
  Gens asked;
  {
    std::lock_guard lock(mu_);
    asked = gens_locked();
  }
  WEFT_TRY(Inode n, core_.meta->getattr(cred_, inode_.ino));
  while (WEFT_FAULT("client.refresh_size.hold")) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // tests
  std::lock_guard lock(mu_);
  learn_meta_size_locked(n.size, asked);
  return size_;
}

void FileImpl::learn_meta_size_locked(uint64_t meta_size, Gens asked) {
  if (meta_size > size_) {
    if (asked.truncated != truncated_gen_) return;  // from before a truncate here
    // Read ahead while the file was shorter: the chunk that held the old end
    // came back short, and those past it empty. Not holes: fetch them again.
    prefetched_.erase(prefetched_.lower_bound(size_ / inode_.layout.chunk_bytes), prefetched_.end());
    size_ = meta_size;
    return;
  }
  // Meta has the file shorter than this File knows, nothing is on its way to
  // storage, and nothing was written or reported since the ask began (an
  // answer from before a report here would undo it): another client
  // truncated it. What this File wrote past the new end before the last
  // report is gone, so its later writes must be reported again; writes not
  // reported yet (acknowledged after the truncate, or their report answers
  // it) still count.
  if (meta_size < size_ && asked == gens_locked() && dirty_.empty() && in_flight_.empty()) {
    const uint64_t known = std::max(meta_size, reported_gen_ == write_gen_ ? 0 : unreported_end_);
    if (known >= size_) return;
    size_ = known;
    written_end_ = std::min(written_end_, known);
    unreported_end_ = std::min(unreported_end_, known);
    reported_ = std::min(reported_, meta_size);
    prefetched_.clear();
  }
}

Result<ChunkAddress> FileImpl::address(uint64_t index) const {
  if (stripe_.empty()) return error(Code::kInternal, "file {} has no stripe", inode_.ino);
  return ChunkAddress{inode_.ino, index, chain_of_chunk(stripe_, index), inode_.layout.chunk_bytes};
}

bool FileImpl::failed() const {
  std::lock_guard lock(mu_);
  return failed_.has_value();
}

Result<void> FileImpl::check_usable_locked() const {
  if (closed_ || closing_) return error(Code::kBadHandle, "file {} is closed", inode_.ino);
  if (failed_) return std::unexpected(*failed_);
  return {};
}

size_t FileImpl::add_extent(DirtyChunk& chunk, uint32_t start, uint32_t end) {
  auto& ex = chunk.extents;
  size_t before = chunk.bytes;
  // Merge with every extent that overlaps or touches [start, end).
  auto it = ex.upper_bound(start);
  if (it != ex.begin() && std::prev(it)->second >= start) --it;
  while (it != ex.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    chunk.bytes -= it->second - it->first;
    it = ex.erase(it);
  }
  ex.emplace(start, end);
  chunk.bytes += end - start;
  return chunk.bytes - before;
}

Result<size_t> FileImpl::pwrite(std::span<const std::byte> src, uint64_t offset) {
  if (!writable_) return error(Code::kBadHandle, "file {} is not open for writing", inode_.ino);
  if (src.empty()) return 0;
  if (!append_) {
    std::shared_lock cut(shared_->cut);
    return write_at(src, offset);
  }
  std::lock_guard appending(shared_->append);
  std::shared_lock cut(shared_->cut);
  return write_at(src, std::max(core_.local_size(inode_.ino), size()));
}

Result<size_t> FileImpl::write_at(std::span<const std::byte> src, uint64_t offset) {
  core_.local_changes.fetch_add(1);  // before any byte is buffered (client/early_read.h)
  // As Linux: no byte at or past the maximum length; a write that crosses it is cut short there.
  if (offset >= meta::kFileBytesMax)
    return error(Code::kFileTooBig, "write at {} of file {}: the maximum file size is {}", offset, inode_.ino,
                 meta::kFileBytesMax);
  src = src.first(static_cast<size_t>(std::min<uint64_t>(src.size(), meta::kFileBytesMax - offset)));
  // Older bytes another File here holds over this range go out first: each
  // File sends on its own, and an older send landing after this one would
  // put the older bytes back.
  core_.order_other_writers(inode_.ino, this, offset, src.size());
  const uint32_t cb = inode_.layout.chunk_bytes;
  for (const ChunkSpan& s : split_range(offset, src.size(), cb)) {
    std::unique_lock lock(mu_);
    WEFT_RETURN_IF_ERROR(check_usable_locked());
    if (!dirty_.contains(s.chunk_index)) {
      // A new chunk buffer: its memory is charged before it is taken (the
      // wait, if the budget is spent, must not hold the lock: memory pressure
      // sends this File's dirty chunks to free it).
      lock.unlock();
      core_.dirty->acquire(cb);
      lock.lock();
      if (auto usable = check_usable_locked(); !usable) {
        core_.dirty->release(cb);
        return std::unexpected(usable.error());
      }
      if (dirty_.contains(s.chunk_index)) core_.dirty->release(cb);  // another writer made it meanwhile
      else dirty_[s.chunk_index].data = Buffer::allocate(cb);
    }
    prefetched_.erase(s.chunk_index);
    DirtyChunk& chunk = dirty_[s.chunk_index];
    ++write_gen_;
    if (chunk.extents.empty()) chunk.first_gen = write_gen_;
    std::memcpy(chunk.data.data() + s.offset, src.data() + s.buffer_offset, s.length);
    add_extent(chunk, s.offset, s.offset + s.length);
    uint64_t end = offset + s.buffer_offset + s.length;
    size_ = std::max(size_, end);
    written_end_ = std::max(written_end_, end);
    unreported_end_ = std::max(unreported_end_, end);
    bool full = chunk.bytes == cb;
    if (full) send_locked(s.chunk_index);
    if (dirty_.size() > kDirtyChunksMax) send_all_locked();
  }
  return src.size();
}

namespace {

// Whether the disjoint extents `ex` (start -> end) reach into [start, end).
bool overlaps(const std::map<uint32_t, uint32_t>& ex, uint32_t start, uint32_t end) {
  auto it = ex.upper_bound(start);
  if (it != ex.begin() && std::prev(it)->second > start) return true;
  return it != ex.end() && it->first < end;
}

}  // namespace

void FileImpl::order_before_write(uint64_t offset, uint64_t length) {
  if (!writable_) return;
  std::unique_lock lock(mu_);
  // Only writes made here before the caller's go first: one made meanwhile
  // (a new buffer of the chunk while its send is in flight) may stay
  // buffered, and waiting for it could last until this File flushes.
  const uint64_t upto = write_gen_;
  for (const ChunkSpan& s : split_range(offset, length, inode_.layout.chunk_bytes)) {
    const uint32_t start = s.offset, end = s.offset + s.length;
    auto buffered = [&] {
      auto d = dirty_.find(s.chunk_index);
      return d != dirty_.end() && d->second.first_gen <= upto && overlaps(d->second.extents, start, end);
    };
    auto sending = [&] {
      auto f = in_flight_.find(s.chunk_index);
      return f != in_flight_.end() && f->second.first_gen <= upto && overlaps(f->second.extents, start, end);
    };
    if (buffered()) {
      // Sent now, or (a send of the chunk is in flight) by on_sent right after it.
      flush_upto_ = std::max(flush_upto_, dirty_[s.chunk_index].first_gen);
      send_locked(s.chunk_index);
    }
    // A failed File dropped its buffers; its sends in flight may still land.
    cv_.wait(lock, [&] { return !sending() && (failed_ || !buffered()); });
  }
}

void FileImpl::send_locked(uint64_t index) {
  if (in_flight_.contains(index)) return;  // on_sent sends it again if still dirty
  auto it = dirty_.find(index);
  if (it == dirty_.end()) return;
  auto address = this->address(index);
  if (!address) {
    fail_locked(address.error());
    return;
  }
  DirtyChunk chunk = std::move(it->second);
  dirty_.erase(it);
  in_flight_.emplace(index, InFlight{chunk.first_gen, chunk.extents});
  size_t charged = chunk.data.size();
  // The destructor flushes too (close() not called): no shared_ptr to this
  // exists then, and none is needed, as it waits for every send to complete.
  std::shared_ptr<FileImpl> self = weak_from_this().lock();
  asio::co_spawn(core_.io->next().get_executor(),
                 send_chunk(*core_.chunks, *address, std::move(chunk.data), std::move(chunk.extents)),
                 [self, raw = this, index, charged](std::exception_ptr e, Result<void> r) mutable {
                   if (e) r = std::unexpected(Status(Code::kInternal, "exception while writing a chunk"));
                   Releaser& releaser = *raw->core_.releaser;
                   raw->on_sent(index, charged, std::move(r));  // raw may be gone after this when self is null
                   if (self) releaser.release(std::move(self));
                 });
}

void FileImpl::send_all_locked() {
  // Not while iterating dirty_: send_locked erases from it.
  std::vector<uint64_t> indexes;
  indexes.reserve(dirty_.size());
  for (auto& d : dirty_) indexes.push_back(d.first);
  for (uint64_t i : indexes) send_locked(i);
}

void FileImpl::on_sent(uint64_t index, size_t charged, Result<void> r) {
  core_.dirty->release(charged);
  if (r && WEFT_FAULT("client.write.fail")) r = error(Code::kIoError, "injected: write of chunk {}", index);  // tests
  // Success or not (a failed send may have written some extents, or been
  // applied before the client gave up): the siblings' read-ahead of the
  // chunk goes. Before mu_: it locks the other Files.
  core_.chunk_written(inode_.ino, index, this);
  std::lock_guard lock(mu_);
  in_flight_.erase(index);
  if (!r) {
    if (!failed_) WEFT_LOG_WARN("file {}: writing chunk {} failed: {}", inode_.ino, index, r.error());
    fail_locked(r.error());
  }
  auto it = dirty_.find(index);
  if (it != dirty_.end() && (it->second.first_gen <= flush_upto_ || it->second.bytes == inode_.layout.chunk_bytes ||
                             dirty_.size() > kDirtyChunksMax))
    send_locked(index);
  // Under the lock: a destructor waiting in flush_locked may free this File
  // as soon as it can take the lock.
  cv_.notify_all();
}

void FileImpl::fail_locked(Status status) {
  if (!failed_) failed_ = std::move(status);
  size_t held = 0;
  for (auto& d : dirty_) held += d.second.data.size();
  dirty_.clear();
  if (held) core_.dirty->release(held);
}

bool FileImpl::dirty_upto_locked(uint64_t gen) const {
  return std::any_of(dirty_.begin(), dirty_.end(), [&](const auto& d) { return d.second.first_gen <= gen; });
}

bool FileImpl::in_flight_upto_locked(uint64_t gen) const {
  return std::any_of(in_flight_.begin(), in_flight_.end(), [&](const auto& f) { return f.second.first_gen <= gen; });
}

Result<void> FileImpl::flush_locked(std::unique_lock<std::mutex>& lock, bool for_read) {
  WEFT_TRY(auto owed, flush_data_locked(lock, for_read));
  if (!owed) return {};
  WEFT_RETURN_IF_ERROR(report_may_reach_meta());
  auto r = report_length(lock, *owed);
  if (!r && r.error().code() == Code::kBadHandle && closing_) {
    // A close on another thread ended the session first (close_with_length):
    // its report covers this one if it took it.
    cv_.wait(lock, [&] { return closed_; });
    // (Its length may be below this one's: an answer to another client's
    // truncate lowers it.)
    if (reported_gen_ >= owed->upto) return {};
  }
  return r;
}

Result<std::optional<FileImpl::LengthReport>> FileImpl::flush_data_locked(std::unique_lock<std::mutex>& lock,
                                                                          bool for_read) {
  const uint64_t upto = write_gen_;
  // The end of the writes since the last report (all numbered up to `upto`):
  // the length this flush may report. A flush running beside this one takes
  // the same and reports it itself, so neither returns before it is reported.
  const uint64_t end = unreported_end_;
  flush_upto_ = std::max(flush_upto_, upto);
  send_all_locked();
  cv_.wait(lock, [&] { return !in_flight_upto_locked(upto) && (failed_ || !dirty_upto_locked(upto)); });
  if (failed_) return std::unexpected(*failed_);
  return report_owed_locked(end, upto, for_read);
}

std::optional<FileImpl::LengthReport> FileImpl::report_owed_locked(uint64_t end, uint64_t upto, bool for_read) const {
  if (!writable_) return std::nullopt;
  // Not past what a truncate meanwhile cut (it lowered written_end_). Not the
  // end of writes reported before either: another client may have cut the
  // file below them since, and they are not to be brought back as zeros.
  const uint64_t length = std::min(end, written_end_);
  // A read needs the bytes on storage, and the length only if it grew.
  const bool report = length > reported_ || (!for_read && upto > reported_gen_);
  if (!report) return std::nullopt;
  return LengthReport{length, upto};
}

Result<void> FileImpl::report_may_reach_meta() const {
  // Tests: a writer that died with its chunks on storage, its length unreported.
  if (WEFT_FAULT("client.report_length.lost"))
    return error(Code::kIoError, "injected: the length report of file {} is lost", inode_.ino);
  return {};
}

FileImpl::ReportHold FileImpl::hold_reports(std::unique_lock<std::mutex>& lock, LengthReport& report) {
  lock.unlock();
  ReportHold hold{std::shared_lock(shared_->reports), std::unique_lock(reporting_mu_)};
  lock.lock();
  report.length = std::min(report.length, written_end_);  // truncated_to lowered it
  return hold;
}

void FileImpl::report_on_its_way() {
  // Tests: a length report (or close) held on its way to meta, as long as
  // the point fires (client.report_length.hold).
  while (WEFT_FAULT("client.report_length.hold")) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

Result<meta::LengthReply> FileImpl::send_report(uint64_t& length, bool close, std::optional<uint64_t> probe_from,
                                                std::optional<uint64_t>& answered) {
  answered.reset();
  if (probe_from && length > *probe_from) {
    WEFT_TRY(length, stored_end(core_, inode_, *probe_from, length));
  }
  uint64_t ack = 0;
  for (;;) {
    // Tests: a meta from before close_with_length.
    auto r = !close ? core_.meta->report_length(cred_, inode_.ino, session_id_, length, ack)
             : WEFT_FAULT("client.meta_without_close_with_length")
                 ? Result<meta::LengthReply>(error(Code::kUnknownMethod, "injected: meta has no close_with_length"))
                 : core_.meta->close_with_length(cred_, inode_.ino, session_id_, length, ack);
    // Tests: meta took the answer to a cut, its reply never came back.
    if (r && ack != 0 && WEFT_FAULT("client.report_length.answer_lost"))
      return error(Code::kTimeout, "injected: the reply to file {}'s answer to a truncate is lost", inode_.ino);
    if (!r || r->cut.gen == 0) return r;
    // Capped for a truncate by another client (meta/types.h SessionCut):
    // report what storage still holds of these writes past it, and say so.
    WEFT_TRY(length, stored_end(core_, inode_, r->cut.length, length));
    ack = r->cut.gen;
    answered = answered ? std::min(*answered, r->cut.length) : r->cut.length;
  }
}

Result<meta::LengthReply> FileImpl::send_and_record(std::unique_lock<std::mutex>& lock, LengthReport& report,
                                                    bool close) {
  const std::optional<uint64_t> probe_from = cut_to_probe_;
  const bool probes = probe_from && report.length > *probe_from;  // send_report lowers report.length
  lock.unlock();
  report_on_its_way();
  std::optional<uint64_t> answered;
  auto r = send_report(report.length, close, probe_from, answered);
  lock.lock();
  if (r) {
    reported_locked(report, r->inode.size, probes, answered);
  } else if (answered) {
    // Meta may have taken the answer (its reply lost): it caps no more, so
    // every later report of these writes looks at storage itself.
    remember_cut_locked(*answered);
  }
  return r;
}

Result<void> FileImpl::report_length(std::unique_lock<std::mutex>& lock, LengthReport report) {
  auto hold = hold_reports(lock, report);
  auto r = send_and_record(lock, report, false);
  if (!r) return error(r.error().with_context(fmt::format("report the length of file {}", inode_.ino)));
  return {};
}

void FileImpl::reported_locked(const LengthReport& report, uint64_t meta_size, bool probed,
                               std::optional<uint64_t> answered) {
  reported_ = std::max(reported_, report.length);
  reported_gen_ = std::max(reported_gen_, report.upto);
  core_.length_reports.fetch_add(1);  // before unreported_end stops covering them (core.h)
  if (write_gen_ == report.upto) unreported_end_ = 0;  // else later writes keep theirs (and this end)
  size_ = std::max(size_, meta_size);
  if (!probed && !answered) return;
  if (write_gen_ == report.upto && dirty_.empty() && in_flight_.empty()) {
    // Nothing written here since: what these writes put past report.length
    // (what storage holds of them) another client's truncate removed, and
    // this File's length is meta's.
    size_ = meta_size;
    written_end_ = std::min(written_end_, report.length);
    reported_ = report.length;
    prefetched_.clear();
    cut_to_probe_.reset();
  } else if (answered) {
    remember_cut_locked(*answered);
  }
  // Else (probed for a cut remembered before, with writes since) the cut
  // stays remembered: this File's ends still count the removed writes.
}

void FileImpl::remember_cut_locked(uint64_t cut) {
  // Writes since the report may have reached storage before the truncate,
  // and this File's ends (written_end_, unreported_end_, size_) still count
  // what it removed: until a report finds nothing written meanwhile (and
  // lowers them), every report looks at storage past the cut.
  cut_to_probe_ = std::min(cut_to_probe_.value_or(cut), cut);
}

std::pair<Result<void>, bool> FileImpl::close_reporting(std::unique_lock<std::mutex>& lock, LengthReport report) {
  if (auto may = report_may_reach_meta(); !may) return {may, false};
  if (session_id_ == 0 || !core_.meta_closes_with_length.load(std::memory_order_relaxed))
    return {report_length(lock, report), false};
  auto hold = hold_reports(lock, report);
  auto r = send_and_record(lock, report, true);
  if (r) return {Result<void>(), true};
  if (r.error().code() == Code::kUnknownMethod) {
    core_.meta_closes_with_length.store(false, std::memory_order_relaxed);
    hold.unlock();  // report_length takes them again
    return {report_length(lock, report), false};
  }
  // A refusal changed nothing at meta; after a lost reply the commit may have
  // landed; a capped close whose answer failed left the length at the cut.
  // Either way the caller abandons the session (kBadHandle if it is gone):
  // meta's session reaper closes it with what storage holds.
  return {error(r.error().with_context(fmt::format("close file {}", inode_.ino))), false};
}

void FileImpl::send_dirty() {
  std::lock_guard lock(mu_);
  send_all_locked();
}

Result<void> FileImpl::flush() {
  std::unique_lock lock(mu_);
  if (closing_ && !closed_) {
    // Another thread closes it: its flush is this one (the caller orders
    // itself after this File's writes, e.g. a truncate or a read), and so is
    // its outcome.
    cv_.wait(lock, [&] { return closed_; });
    return close_flushed_;
  }
  WEFT_RETURN_IF_ERROR(check_usable_locked());
  if (!writable_) return {};
  return flush_locked(lock);
}

void FileImpl::flush_before_read() {
  std::unique_lock lock(mu_);
  if (closing_ && !closed_) cv_.wait(lock, [&] { return closed_; });  // its close flushes
  if (closed_ || !writable_) return;  // nothing on its way to order after
  // Failed too: its sends still in flight may land, and go before the caller's cut.
  (void)flush_locked(lock, true);  // a failure is this File's, reported by its next call
}

Result<void> FileImpl::close() {
  std::unique_lock lock(mu_);
  if (closed_ || closing_) return error(Code::kBadHandle, "file {} is closed", inode_.ino);
  closing_ = true;  // every write accepted before this is one the flush waits for
  Result<void> flushed;
  bool session_closed = false;
  if (writable_) {
    auto owed = flush_data_locked(lock, false);
    if (!owed)
      flushed = std::unexpected(owed.error());
    else if (*owed)
      std::tie(flushed, session_closed) = close_reporting(lock, **owed);
  }
  close_flushed_ = flushed;
  if (writable_ && flushed) shared_->raise_closed_end(written_end_);  // before a truncate can see it closed
  closed_ = true;
  cv_.notify_all();  // flush() callers waiting for this close
  prefetched_.clear();  // a caller may keep the closed File: not its read-ahead (up to 16 MiB)
  // Give back what failed writes still hold.
  size_t held = 0;
  for (auto& d : dirty_) held += d.second.data.size();
  dirty_.clear();
  lock.unlock();
  if (held) core_.dirty->release(held);
  if (session_id_ != 0 && !session_closed) {
    // Tests: a writer that died before its close reached meta.
    if (WEFT_FAULT("client.close.lost")) return error(Code::kIoError, "injected: the close of file {} is lost", inode_.ino);
    // A failed flush or length report may leave written bytes past the
    // length meta knows: the session is abandoned, and meta's session reaper
    // closes it with what storage holds (meta/meta_store.h abandon_session),
    // rather than closed here without them.
    auto r = core_.closer->close(cred_, inode_.ino, session_id_, /*abandon=*/!flushed);
    if (!r && flushed) return error(r.error().with_context(fmt::format("close file {}", inode_.ino)));
  }
  return flushed;
}

Result<void> FileImpl::close_flushed() const {
  std::lock_guard lock(mu_);
  return close_flushed_;
}

Result<size_t> FileImpl::pread(std::span<std::byte> dst, uint64_t offset) {
  if (!readable_) return error(Code::kBadHandle, "file {} is not open for reading", inode_.ino);
  return pread_page_fill(dst, offset);
}

Result<size_t> FileImpl::pread_page_fill(std::span<std::byte> dst, uint64_t offset) {
  uint64_t size;
  bool sequential;
  Gens asked;  // for a length meta gives if the read meets a hole
  const uint64_t truncated_before = truncated_gen_.load();
  const uint64_t others_know = core_.flush_other_writers(inode_.ino, this);
  {
    std::unique_lock lock(mu_);
    WEFT_RETURN_IF_ERROR(check_usable_locked());
    if (truncated_gen_ == truncated_before) size_ = std::max(size_, others_know);  // else older than the truncate
    // Read-your-writes: bytes still buffered here go out first.
    if (writable_ && (!dirty_.empty() || !in_flight_.empty())) WEFT_RETURN_IF_ERROR(flush_locked(lock, true));
    size = size_;
    asked = gens_locked();
    // A stream starts with a read where the previous one ended. Once it runs
    // (ra_window_ > 0), reads within kReorderChunks chunks of its end still
    // belong to it: concurrent readers of one handle (the mount's FUSE
    // threads serving the kernel's read-ahead) arrive slightly out of order.
    const uint64_t slack = uint64_t{kReorderChunks} * inode_.layout.chunk_bytes;
    const uint64_t distance = offset >= next_read_ ? offset - next_read_ : next_read_ - offset;
    sequential = offset == next_read_ || (ra_window_ > 0 && distance <= slack);
    // Saturated: an offset near 2^64 (read as past the end below) must not wrap to a small "sequential" one.
    const uint64_t end = offset > UINT64_MAX - dst.size() ? UINT64_MAX : offset + dst.size();
    next_read_ = sequential ? std::max(next_read_, end) : end;
    if (!sequential) {
      ra_window_ = 0;
      prefetched_.clear();
    }
  }
  if (offset >= size) {
    // Past the end this File knows: another client may have written there.
    // (A read that only straddles the end uses the known length: close-to-open.)
    WEFT_TRY(size, refresh_size());
  }
  if (offset >= size || dst.empty()) return 0;
  size_t want = static_cast<size_t>(std::min<uint64_t>(dst.size(), size - offset));
  const uint32_t cb = inode_.layout.chunk_bytes;
  if (sequential && core_.options.readahead_bytes_max >= cb) {
    std::lock_guard lock(mu_);
    uint32_t max_window = static_cast<uint32_t>(core_.options.readahead_bytes_max / cb);
    ra_window_ = std::clamp<uint32_t>(ra_window_ * 2, std::min(2u, max_window), max_window);  // max_window >= 1
    prefetch_locked(offset / cb, size);
  }
  WEFT_TRY(std::optional<uint64_t> meta_size, read_spans(dst, offset, want));
  if (meta_size) {
    // It met a hole and asked meta: the file may be shorter than this File
    // knew (another client cut it). The end is meta's length, or what Files
    // here wrote that meta may not count yet; zeros past it are not the file's.
    const uint64_t end = std::max(*meta_size, core_.unreported_end(inode_.ino));
    {
      std::lock_guard lock(mu_);
      learn_meta_size_locked(end, asked);
    }
    want = static_cast<size_t>(std::min<uint64_t>(want, end > offset ? end - offset : 0));
  }
  return want;
}

void FileImpl::prefetch_locked(uint64_t first_chunk, uint64_t size) {
  const uint32_t cb = inode_.layout.chunk_bytes;
  // Chunks well behind the stream are done with (a straggler may still want the last few).
  const uint64_t keep_from = first_chunk > kReorderChunks ? first_chunk - kReorderChunks : 0;
  while (!prefetched_.empty() && prefetched_.begin()->first < keep_from) prefetched_.erase(prefetched_.begin());
  uint64_t end_chunk = meta::chunk_count(size, cb);
  for (uint64_t i = first_chunk; i < std::min(end_chunk, first_chunk + ra_window_); ++i) {
    // A chunk with writes not yet acknowledged would be fetched without them.
    if (prefetched_.contains(i) || dirty_.contains(i) || in_flight_.contains(i)) continue;
    auto address = this->address(i);
    if (!address) return;
    if (!core_.readahead->try_acquire(cb)) return;  // the client's read-ahead memory is spent
    auto p = std::make_shared<Prefetch>(*core_.readahead, cb);
    p->data = Buffer::allocate(cb);
    prefetched_.emplace(i, p);
    auto self = shared_from_this();
    asio::co_spawn(core_.io->next().get_executor(), core_.chunks->read_once(*address, 0, p->data.span()),
                   [self, p](std::exception_ptr e, Result<uint32_t> r) mutable {
                     if (e) r = std::unexpected(Status(Code::kInternal, "exception while reading ahead"));
                     {
                       std::lock_guard lock(self->mu_);
                       p->got = std::move(r);
                       p->done = true;
                     }
                     self->cv_.notify_all();
                     Releaser& releaser = *self->core_.releaser;
                     releaser.release(std::move(self));
                   });
  }
}

// One chunk read on the caller's thread: its own connections, no hand-off
// to an I/O thread and back (for a 4 KiB random read those two hops cost
// more CPU and scheduler delay than the network). If that round over the
// replicas fails, ChunkIo::read() (routing refresh, backoff, retries) follows.
Result<uint32_t> FileImpl::read_chunk_here(ChunkAddress address, uint32_t offset, std::span<std::byte> dst) {
  size_t budget = std::min<size_t>(dst.size(), core_.options.inflight_bytes_max);
  core_.inflight->acquire(budget);
  auto r = core_.chunks->read_blocking(address, offset, dst);
  if (!r) {
    WEFT_LOG_DEBUG("file {}: {}; retrying through the I/O threads", inode_.ino, r.error());
    std::vector<Task<Result<uint32_t>>> task;
    task.push_back(core_.chunks->read(address, offset, dst));
    r = std::move(run_parallel(*core_.io, std::move(task))[0]);
  }
  core_.inflight->release(budget);
  return r;
}

// Reads spans[i] for every i in `which` through the I/O threads, in
// parallel, under the in-flight byte bound; got[i] is what each returned.
Result<void> FileImpl::read_direct(std::span<const ChunkSpan> spans, std::span<const size_t> which,
                                   std::span<std::byte> dst, std::vector<uint32_t>& got) {
  if (which.empty()) return {};
  std::vector<Task<Result<uint32_t>>> tasks;
  size_t bytes = 0;
  for (size_t i : which) {
    WEFT_TRY(ChunkAddress address, this->address(spans[i].chunk_index));
    tasks.push_back(core_.chunks->read(address, spans[i].offset, dst.subspan(spans[i].buffer_offset, spans[i].length)));
    bytes += spans[i].length;
  }
  size_t budget = std::min<size_t>(bytes, core_.options.inflight_bytes_max);
  core_.inflight->acquire(budget);
  auto results = run_parallel(*core_.io, std::move(tasks));
  core_.inflight->release(budget);
  for (size_t k = 0; k < which.size(); ++k) {
    if (!results[k]) return std::unexpected(results[k].error());
    got[which[k]] = *results[k];
  }
  return {};
}

Result<std::optional<uint64_t>> FileImpl::read_spans(std::span<std::byte> dst, uint64_t offset, size_t want) {
  auto spans = split_range(offset, want, inode_.layout.chunk_bytes);
  std::vector<std::shared_ptr<Prefetch>> ahead(spans.size());
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < spans.size(); ++i)
      if (auto it = prefetched_.find(spans[i].chunk_index); it != prefetched_.end()) ahead[i] = it->second;
  }
  if (spans.size() == 1 && !ahead[0] && rpc::IoPool::current_context() == nullptr) {
    const ChunkSpan& s = spans[0];
    WEFT_TRY(ChunkAddress address, this->address(s.chunk_index));
    auto part = dst.subspan(s.buffer_offset, s.length);
    WEFT_TRY(uint32_t got, read_chunk_here(address, s.offset, part));
    if (got == part.size()) return std::nullopt;
    WEFT_TRY(uint64_t meta_size, check_not_removed());
    std::memset(part.data() + got, 0, part.size() - got);  // a hole
    return meta_size;
  }
  // Direct reads for the spans nobody fetched ahead, in parallel.
  std::vector<uint32_t> got(spans.size(), 0);
  std::vector<size_t> direct;
  for (size_t i = 0; i < spans.size(); ++i)
    if (!ahead[i]) direct.push_back(i);
  WEFT_RETURN_IF_ERROR(read_direct(spans, direct, dst, got));
  // Spans fetched ahead. Read-ahead is a guess made on the reader's behalf:
  // when it failed (a whole chunk read is the likelier to meet a bad block or
  // a replica going away), the caller's own range is read again directly,
  // with ChunkIo::read's failover and retries, rather than failing the read.
  std::vector<size_t> failed;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (!ahead[i]) continue;
    const ChunkSpan& s = spans[i];
    Prefetch& p = *ahead[i];
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return p.done; });
      if (!p.got) {
        WEFT_LOG_DEBUG("file {}: read-ahead of chunk {} failed ({}); reading the range directly", inode_.ino,
                       s.chunk_index, p.got.error());
        if (auto it = prefetched_.find(s.chunk_index); it != prefetched_.end() && it->second == ahead[i])
          prefetched_.erase(it);
        failed.push_back(i);
        continue;
      }
    }
    uint32_t have = *p.got > s.offset ? std::min(*p.got - s.offset, s.length) : 0;
    if (have < s.length) {
      // Short: a hole, or the file grew since (the bytes came later, here or
      // elsewhere). Only a direct read tells.
      failed.push_back(i);
      continue;
    }
    std::memcpy(dst.data() + s.buffer_offset, p.data.data() + s.offset, have);
    got[i] = have;
  }
  WEFT_RETURN_IF_ERROR(read_direct(spans, failed, dst, got));
  // Past the end of a chunk (or a missing chunk) inside the file: a hole.
  std::optional<uint64_t> meta_size;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (got[i] >= spans[i].length) continue;
    if (!meta_size) {
      WEFT_TRY(meta_size, check_not_removed());
    }
    std::memset(dst.data() + spans[i].buffer_offset + got[i], 0, spans[i].length - got[i]);
  }
  return meta_size;
}

// Read-only opens hold no session at meta, so a file unlinked (or renamed
// over) while open here is destroyed and its chunks collected: its reads
// then find chunks missing inside the length this File knows. Zeros would
// pass for data; asking meta tells a hole from a file that is gone.
Result<uint64_t> FileImpl::check_not_removed() {
  auto n = core_.meta->getattr(cred_, inode_.ino);
  if (n) return n->size;
  if (n.error().code() == Code::kNotFound)
    return error(Code::kStaleHandle, "file {} was removed while open here: its data is gone", inode_.ino);
  return std::unexpected(n.error());
}

Result<void> FileImpl::truncate(uint64_t length) {
  if (!writable_) return error(Code::kBadHandle, "file {} is not open for writing", inode_.ino);
  {
    std::unique_lock lock(mu_);
    WEFT_RETURN_IF_ERROR(check_usable_locked());
  }
  // Through the client: every File of this inode open here (this one too)
  // flushes first and learns the new length.
  return core_.truncate_open(cred_, inode_.ino, length, session_id_);
}

// This File's writes go out first (with their length), then one length
// report of `length` through the session: meta keeps the larger. Nothing
// here changes until meta took it, so a failed extend leaves no trace in
// this File (meta may still have it after a lost reply, as with any call).
// Under a ReportHold: a truncate of the inode from this client comes wholly
// before or after the report. A truncate by another client after the flush
// caps the report (meta/types.h SessionCut): the extension is made now,
// after it, so it acknowledges it once every write here is reported (else
// those writes are flushed, and their report answers it, first).
Result<void> FileImpl::extend(uint64_t length) {
  if (!writable_) return error(Code::kBadHandle, "file {} is not open for writing", inode_.ino);
  if (length > meta::kFileBytesMax)
    return error(Code::kFileTooBig, "extend file {} to {}: the maximum file size is {}", inode_.ino, length,
                 meta::kFileBytesMax);
  core_.local_changes.fetch_add(1);  // client/early_read.h
  std::unique_lock lock(mu_);
  WEFT_RETURN_IF_ERROR(check_usable_locked());
  for (uint64_t ack = 0;;) {
    WEFT_RETURN_IF_ERROR(flush_locked(lock));
    WEFT_RETURN_IF_ERROR(report_may_reach_meta());
    LengthReport none;
    auto hold = hold_reports(lock, none);
    lock.unlock();
    auto r = core_.meta->report_length(cred_, inode_.ino, session_id_, length, ack);
    lock.lock();
    if (!r) return error(r.error().with_context(fmt::format("extend file {} to {}", inode_.ino, length)));
    if (r->cut.gen == 0) {
      size_ = std::max(size_, r->inode.size);
      // The siblings here count it as written: their appends go after it,
      // their reads see up to it (OpenInode::closed_end).
      shared_->raise_closed_end(length);
      return {};
    }
    // Every write here reported (each report answered the cuts it met):
    // nothing of this File's is left for the cut to have removed.
    const bool all_reported = reported_gen_ == write_gen_ && dirty_.empty() && in_flight_.empty();
    ack = all_reported ? r->cut.gen : 0;
  }
}

void FileImpl::drop_read_ahead(uint64_t index) {
  std::lock_guard lock(mu_);
  prefetched_.erase(index);
}

void FileImpl::adopt_early_read(Buffer data, uint32_t got, size_t charged) {
  auto p = std::make_shared<Prefetch>(*core_.early_reads, charged);
  p->data = std::move(data);
  p->got = got;
  std::lock_guard lock(mu_);
  p->done = true;
  prefetched_.emplace(0, std::move(p));
  // A first read from offset 0 is then a sequential one, which keeps
  // read-ahead (a first read elsewhere drops it, as any unused read-ahead).
  next_read_ = 0;
}

void FileImpl::drop_early_read() { drop_read_ahead(0); }

void FileImpl::truncated_to(uint64_t length) {
  std::lock_guard lock(mu_);
  ++truncated_gen_;
  prefetched_.clear();
  size_ = length;
  written_end_ = std::min(written_end_, length);
  unreported_end_ = std::min(unreported_end_, length);
  reported_ = length;
}

}  // namespace weft::client
