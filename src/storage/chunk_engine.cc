#include "storage/chunk_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "common/assert.h"
#include "common/log_throttle.h"
#include "common/logging.h"
#include "common/periodic.h"
#include "common/random.h"
#include "common/rocks_env.h"
#include "storage/engine_internal.h"
#include "storage/flush_scope.h"

namespace weft::storage {

ChunkEngine::Metrics::Metrics(metrics::Registry& r, const std::string& target)
    : bytes_read(r.counter("weft_storage_bytes_read_total", "Chunk bytes returned by reads", {{"target", target}})),
      bytes_written(r.counter("weft_storage_bytes_written_total", "Chunk bytes written to slots", {{"target", target}})),
      reads(r.counter("weft_storage_ops_total", "Chunk engine operations", {{"target", target}, {"op", "read"}})),
      stages(r.counter("weft_storage_ops_total", "Chunk engine operations", {{"target", target}, {"op", "stage"}})),
      commits(r.counter("weft_storage_ops_total", "Chunk engine operations", {{"target", target}, {"op", "commit"}})),
      removes(r.counter("weft_storage_ops_total", "Chunk engine operations", {{"target", target}, {"op", "remove"}})),
      checksum_failures(r.counter("weft_storage_checksum_failures_total", "Blocks or chunks whose CRC32C mismatched",
                                  {{"target", target}})),
      read_latency_us(r.histogram("weft_storage_read_latency_us", "Chunk read latency", {{"target", target}})),
      stage_latency_us(r.histogram("weft_storage_stage_latency_us", "Chunk stage (slot write) latency",
                                   {{"target", target}})),
      commit_latency_us(r.histogram("weft_storage_commit_latency_us", "Chunk index commit latency",
                                    {{"target", target}})),
      commit_group_size(r.histogram("weft_storage_commit_group_size", "Index updates per synced index write",
                                    {{"target", target}})),
      ring_depth(r.gauge("weft_storage_ring_queue_depth", "Queued + in-flight io_uring operations",
                         {{"target", target}})) {}

ChunkEngine::ChunkLock::ChunkLock(ChunkEngine& e, const ChunkId& id) : e_(e), id_(id) {
  std::unique_lock lock(e_.locks_mu_);
  e_.locks_cv_.wait(lock, [&] { return !e_.locked_.contains(id_); });
  e_.locked_.insert(id_);
}

ChunkEngine::ChunkLock::~ChunkLock() {
  {
    std::lock_guard lock(e_.locks_mu_);
    e_.locked_.erase(id_);
  }
  e_.locks_cv_.notify_all();
}

ChunkEngine::ChunkEngine(std::string dir, EngineOptions options, metrics::Registry& registry, uint32_t class_count)
    : dir_(std::move(dir)),
      options_(std::move(options)),
      class_count_(class_count),
      registry_(registry),
      metrics_(std::make_unique<Metrics>(registry, options_.target_id)),
      space_(class_count, ~uint64_t{0}),
      slabs_(class_count),
      stripes_(kStripes) {}

ChunkEngine::~ChunkEngine() {
  space_pass_.reset();  // a pass under way finishes first
  registry_.remove_callbacks(this);
  committer_.reset();
  ring_.reset();  // drains in-flight I/O before the slab files close
}

static Result<void> validate(const EngineOptions& o) {
  if (o.chunk_size_max < kMinClassBytes || o.chunk_size_max > kMaxChunkBytesLimit ||
      (o.chunk_size_max & (o.chunk_size_max - 1)) != 0)
    return error(Code::kConfig, "chunk_size_max {} must be a power of two in [4 KiB, 64 MiB]", o.chunk_size_max);
  if (o.extent_bytes == 0) return error(Code::kConfig, "extent_bytes must be positive");
  return {};
}

struct OpenedIndex {
  std::unique_ptr<rocksdb::DB> db;
  bool v1 = false;  // format 1: no per-chain index yet
  uint64_t data_id = 0;
};

// The index's data id (ChunkEngine::data_id), drawn and written (synced) if it has none.
static Result<uint64_t> load_data_id(rocksdb::DB& db, const std::string& path) {
  std::string value;
  rocksdb::Status s = db.Get(rocksdb::ReadOptions(), rocksdb::Slice(kDataIdKey.data(), kDataIdKey.size()), &value);
  if (s.ok()) {
    uint64_t id = 0;
    if (value.size() == sizeof(id)) std::memcpy(&id, value.data(), sizeof(id));
    if (id == 0) return error(Code::kCorruption, "{} has a bad data id ({} bytes)", path, value.size());
    return id;
  }
  if (!s.IsNotFound()) return error(Code::kIoError, "read data id of {}: {}", path, s.ToString());
  uint64_t id = random_id();
  value.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  s = db.Put(wo, rocksdb::Slice(kDataIdKey.data(), kDataIdKey.size()), value);
  if (!s.ok()) return error(Code::kIoError, "write data id of {}: {}", path, s.ToString());
  return id;
}

static Result<std::unique_ptr<rocksdb::DB>> open_index_db(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.env = rocks_env();  // pre-zeroed WAL: an index commit's sync is a data flush, not a journal commit
  options.max_background_jobs = 2;
  options.compression = rocksdb::kNoCompression;  // values are mostly CRC arrays: incompressible
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  try {
    s = rocksdb::DB::Open(options, path, &raw);
  } catch (const std::exception& e) {
    return error(Code::kIoError, "open chunk index {}: {}", path, e.what());
  }
  if (!s.ok()) return error(s.IsCorruption() ? Code::kCorruption : Code::kIoError, "open chunk index {}: {}", path,
                            s.ToString());
  return std::unique_ptr<rocksdb::DB>(raw);
}

static Result<OpenedIndex> open_index(const std::string& path) {
  WEFT_TRY(std::unique_ptr<rocksdb::DB> db, open_index_db(path));
  std::string format;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), rocksdb::Slice(kFormatKey.data(), kFormatKey.size()), &format);
  if (s.IsNotFound()) {
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = db->Put(wo, rocksdb::Slice(kFormatKey.data(), kFormatKey.size()),
                rocksdb::Slice(kFormatValue.data(), kFormatValue.size()));
    if (!s.ok()) return error(Code::kIoError, "write format of {}: {}", path, s.ToString());
  } else if (!s.ok()) {
    return error(Code::kIoError, "read format of {}: {}", path, s.ToString());
  } else if (format != kFormatValue && format != kFormatValueV1) {
    return error(Code::kCorruption, "{} has unknown format '{}'", path, format);
  }
  WEFT_TRY(uint64_t data_id, load_data_id(*db, path));
  return OpenedIndex{std::move(db), format == kFormatValueV1, data_id};
}

Result<uint64_t> ChunkEngine::ensure_data_id(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return error(Code::kIoError, "create target directory {}: {}", dir, ec.message());
  WEFT_TRY(std::unique_ptr<rocksdb::DB> db, open_index_db(dir + "/index"));
  return load_data_id(*db, dir + "/index");
}

struct ChunkEngine::Settlement {
  rocksdb::WriteBatch batch;  // the restart-check keys' deletes and the records put back
  size_t restart_keys = 0;
  // The record each checked chunk keeps from now on (nullopt: none); the
  // chunks not named keep the record the index has.
  std::unordered_map<ChunkId, std::optional<ChunkMeta>, ChunkIdHash> records;
};

Result<std::unique_ptr<ChunkEngine>> ChunkEngine::open(const std::string& dir, EngineOptions options,
                                                      metrics::Registry& registry) {
  WEFT_RETURN_IF_ERROR(validate(options));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return error(Code::kIoError, "create target directory {}: {}", dir, ec.message());
  uint32_t class_count = class_for_length(options.chunk_size_max) + 1;
  std::unique_ptr<ChunkEngine> e(new ChunkEngine(dir, options, registry, class_count));
  WEFT_TRY(OpenedIndex index, open_index(dir + "/index"));
  e->db_ = std::move(index.db);
  e->data_id_ = index.data_id;
  WEFT_TRY(e->ring_, IoRing::create(options.ring_entries, &e->metrics_->ring_depth));
  // The restart check decides, rebuild() checks everything against this
  // engine's options and slab files and only then writes: a refused open
  // (e.g. a smaller chunk_size_max) leaves the target as it found it.
  Settlement settle;
  WEFT_RETURN_IF_ERROR(e->check_last_group(settle));
  WEFT_RETURN_IF_ERROR(e->rebuild(index.v1, settle));
  e->space_guard_ = std::make_unique<FreeSpaceGuard>(dir, options.reserve_bytes);
  // After a restart nobody knows which free slots inside a slab file were
  // punched: the space pass punches them and a writer re-backs them.
  WEFT_TRY(auto slabs, e->existing_slabs());
  for (SlabFile* file : slabs)
    e->space_.mark_free_unknown(class_for_length(static_cast<uint32_t>(file->slot_bytes())), file->slot_count());
  // Auto capacity: the filesystem is the limit (the guard and fallocate say kNoSpace).
  e->space_.set_capacity_bytes(options.capacity_bytes == 0 ? ~uint64_t{0} : options.capacity_bytes);
  // One flush per commit group needs the slabs on the index's filesystem
  // (a flush is per device) and a filesystem where any fdatasync flushes all.
  e->one_flush_ = one_fdatasync_flushes_both(dir, dir + "/index");
  e->committer_ = std::make_unique<IndexCommitter>(e->db_.get(), e->ring_.get(), &e->metrics_->commit_group_size,
                                                   std::chrono::microseconds(options.commit_linger_us_max),
                                                   e->one_flush_);
  ChunkEngine* self = e.get();
  metrics::Labels labels{{"target", options.target_id}};
  registry.gauge_fn("weft_storage_used_bytes", "Bytes of allocated slots", labels,
                    [self] { return static_cast<double>(self->used_bytes()); }, self);
  registry.gauge_fn("weft_storage_target_failed", "1 while the target refuses updates until reopened (failure())",
                    labels, [self] { return self->failed() ? 1.0 : 0.0; }, self);
  registry.gauge_fn("weft_storage_free_bytes", "Capacity minus used bytes", labels,
                    [self] { return static_cast<double>(self->free_bytes()); }, self);
  registry.gauge_fn("weft_storage_capacity_bytes", "Used plus free bytes (at most the configured capacity)", labels,
                    [self] { return static_cast<double>(self->capacity_bytes()); }, self);
  registry.gauge_fn("weft_storage_unpunched_free_bytes", "Bytes of free slots that may still take filesystem space",
                    labels, [self] { return static_cast<double>(self->unpunched_free_bytes()); }, self);
  e->space_log_ = std::make_unique<LogThrottle>(std::chrono::seconds(10));
  if (options.space_pass_interval_ms > 0)
    e->space_pass_ = std::make_unique<PeriodicThread>(std::chrono::milliseconds(options.space_pass_interval_ms),
                                                      [self] { return self->space_pass_tick(); });
  return e;
}

// Allocation state comes from the index alone: every entry marks its slot.
// Migrating a format-1 index adds every chunk to the per-chain index (under
// the chain its record names: kChainUnknown) and bumps the format, in the
// same batch as the settlement of the last group.
Result<void> ChunkEngine::rebuild(bool migrate, Settlement& settle) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  std::string prefix(1, kChunkKeyPrefix);
  for (it->Seek(prefix); it->Valid() && is_chunk_key(it->key()); it->Next()) {
    auto id = ChunkId::decode(std::string_view(it->key().data() + 1, ChunkId::kEncodedBytes));
    std::optional<ChunkMeta> meta;
    if (auto settled = settle.records.find(*id); settled != settle.records.end()) {
      if (!settled->second) continue;  // the last group's new chunk that did not land
      meta = settled->second;
    } else {
      auto decoded = ChunkMeta::decode(std::string_view(it->value().data(), it->value().size()));
      if (!decoded) return error(decoded.error().with_context(fmt::format("index entry of chunk {}", *id)));
      meta = std::move(*decoded);
    }
    if (meta->size_class >= class_count_)
      return error(Code::kConfig, "chunk {} has {} bytes slots, above chunk_size_max {}: reopen with a larger maximum",
                   *id, class_bytes(meta->size_class), options_.chunk_size_max);
    if (auto slot = slot_of(*meta)) WEFT_RETURN_IF_ERROR(space_.mark_used(*slot));
    if (migrate) settle.batch.Put(chain_key(meta->chain_id, *id), rocksdb::Slice());
    stripe(*id).index[*id] = std::make_shared<const ChunkMeta>(std::move(*meta));
  }
  if (!it->status().ok()) return error(Code::kIoError, "scan chunk index: {}", it->status().ToString());
  for (uint32_t c = 0; c < class_count_; ++c) {
    uint64_t high = space_.slot_high_water(c);
    if (high == 0) continue;
    WEFT_TRY(SlabFile * file, existing_slab(c));
    if (!file)
      return error(Code::kCorruption, "slab file {} is missing but the index uses slot {} of it", slab_path(c),
                   high - 1);
    if (file->slot_count() < high)
      return error(Code::kCorruption, "slab file {} holds {} slots but the index uses slot {}", file->path(),
                   file->slot_count(), high - 1);
  }
  if (migrate)
    settle.batch.Put(rocksdb::Slice(kFormatKey.data(), kFormatKey.size()),
                     rocksdb::Slice(kFormatValue.data(), kFormatValue.size()));
  if (settle.batch.Count() == 0) return {};
  if (settle.restart_keys > 0) {
    // After a crash of the process alone the slots verified from the device's
    // cache, and a grown slab's new extents may not be durable yet: make them
    // so before the keys that could undo the group go.
    WEFT_TRY(auto slabs, existing_slabs());
    for (SlabFile* file : slabs) WEFT_RETURN_IF_ERROR(file->sync_from_now(*ring_));
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, &settle.batch);
  if (!s.ok())
    return error(Code::kIoError, "{} the chunk index of {}: {}",
                 settle.restart_keys > 0 ? "settle the last commit group in" : "migrate", dir_, s.ToString());
  return {};
}

Result<bool> ChunkEngine::slot_verifies(const ChunkMeta& meta) {
  uint32_t padded = (meta.length + 4095) / 4096 * 4096;
  if (padded == 0) return meta.chunk_crc == compute_checksums({}).chunk_crc;
  // Neither says whether the write reached the disk: refuse rather than
  // take an acknowledged version for a lost one.
  if (meta.size_class >= class_count_)
    return error(Code::kConfig, "version {} has {} bytes slots, above chunk_size_max {}: reopen with a larger maximum",
                 meta.version, class_bytes(meta.size_class), options_.chunk_size_max);
  WEFT_TRY(SlabFile * file, existing_slab(meta.size_class));
  if (!file)
    return error(Code::kCorruption, "slab file {} of version {} is missing", slab_path(meta.size_class), meta.version);
  if (meta.slot >= file->slot_count()) return false;  // the slab's growth did not reach the disk
  Buffer buf = Buffer::allocate(padded);
  buf.resize(padded);
  WEFT_RETURN_IF_ERROR(file->read(*ring_, meta.slot, 0, buf.data(), padded));
  Checksums sums = compute_checksums(buf.span().first(meta.length));
  return sums.chunk_crc == meta.chunk_crc && sums.block_crcs == meta.block_crcs;
}

// For each chunk of the last group: keep the new entry if its slot verifies;
// else put the previous entry back if that one's slot verifies (the group was
// never acknowledged, so either version is right); else keep the new entry
// (reads report the corruption). The keys go too; rebuild() writes it all in
// one synced batch once the index passed its checks.
Result<void> ChunkEngine::check_last_group(Settlement& settle) {
  rocksdb::WriteBatch& batch = settle.batch;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kRestartKeyPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    batch.Delete(it->key());
    ++settle.restart_keys;
    auto id = ChunkId::decode(std::string_view(it->key().data() + 1, it->key().size() - 1));
    if (!id) return error(Code::kCorruption, "restart-check key of {} bytes in {}", it->key().size(), dir_);
    auto context = [&](const Status& s) { return s.with_context(fmt::format("restart check of chunk {}", *id)); };
    std::string current_raw;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), chunk_key(*id), &current_raw);
    if (s.IsNotFound()) continue;  // removed since
    if (!s.ok()) return error(Code::kIoError, "read index entry of chunk {}: {}", *id, s.ToString());
    WEFT_TRY(ChunkMeta current, ChunkMeta::decode(current_raw));
    auto current_ok = slot_verifies(current);
    if (!current_ok) return error(context(current_ok.error()));
    if (*current_ok) continue;
    std::optional<ChunkMeta> previous;
    if (!it->value().empty()) {
      WEFT_TRY(previous, ChunkMeta::decode(std::string_view(it->value().data(), it->value().size())));
      auto previous_ok = slot_verifies(*previous);
      if (!previous_ok) return error(context(previous_ok.error()));
      if (!*previous_ok) {
        WEFT_LOG_WARN("chunk {} of the last commit group: neither version {} nor {} verifies; keeping {}", *id,
                  current.version, previous->version, current.version);
        continue;
      }
    }
    WEFT_LOG_WARN("chunk {}: version {} of the last commit group did not reach the disk; back to {}", *id,
              current.version, previous ? fmt::format("version {}", previous->version) : std::string("no chunk"));
    batch.Delete(chain_key(current.chain_id, *id));
    if (previous) {
      batch.Put(chunk_key(*id), previous->encode());
      batch.Put(chain_key(previous->chain_id, *id), rocksdb::Slice());
    } else {
      batch.Delete(chunk_key(*id));
    }
    settle.records[*id] = std::move(previous);
  }
  if (!it->status().ok()) return error(Code::kIoError, "scan restart-check keys: {}", it->status().ToString());
  return {};
}

Result<std::vector<SlabFile*>> ChunkEngine::existing_slabs() {
  std::vector<SlabFile*> files;
  for (uint32_t c = 0; c < class_count_; ++c) {
    if (!std::filesystem::exists(slab_path(c))) continue;
    WEFT_TRY(SlabFile * file, slab(c));
    files.push_back(file);
  }
  return files;
}

// Updates and removals are both admitted down to a quarter of the reserve
// (EngineOptions::reserve_bytes); a slab's growth is checked where it happens.
Result<void> ChunkEngine::check_space() {
  return space_guard_->admit(FreeSpaceGuard::Kind::kRelease);
}

std::string ChunkEngine::slab_path(uint32_t size_class) const {
  return fmt::format("{}/slab_{:02}_{}k.dat", dir_, size_class, class_bytes(size_class) / 1024);
}

Result<SlabFile*> ChunkEngine::existing_slab(uint32_t size_class) {
  WEFT_ASSERT(size_class < class_count_);
  {
    std::lock_guard lock(slabs_mu_);
    if (slabs_[size_class]) return slabs_[size_class].get();
  }
  std::error_code ec;
  bool exists = std::filesystem::exists(slab_path(size_class), ec);
  if (ec) return error(Code::kIoError, "look for slab file {}: {}", slab_path(size_class), ec.message());
  if (!exists) return nullptr;
  return slab(size_class);
}

// A new slab file's directory entry is made durable before any slot of it is
// written (the file is opened before its first slot is allocated in it): a slab file missing at open then means damage (or another
// directory), never a creation lost in a power cut.
Result<SlabFile*> ChunkEngine::slab(uint32_t size_class) {
  WEFT_ASSERT(size_class < class_count_);
  std::lock_guard lock(slabs_mu_);
  auto& file = slabs_[size_class];
  if (!file) {
    const std::string path = slab_path(size_class);
    WEFT_TRY(file, SlabFile::open(path, class_bytes(size_class), options_.extent_bytes, &slab_failed_));
    if (file->slot_count() == 0) {  // new (or never grown): cheap to sync its entry again
      int d = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      int rc = d < 0 ? -1 : ::fsync(d);
      int err = errno;
      if (d >= 0) ::close(d);
      if (rc != 0) {
        file.reset();
        return errno_error(err, fmt::format("sync directory {} after creating {}", dir_, path));
      }
    }
  }
  return file.get();
}

std::optional<Status> ChunkEngine::failure() {
  if (!failed()) return std::nullopt;
  if (auto f = committer_->failure()) return f;
  std::lock_guard lock(slabs_mu_);
  for (const auto& file : slabs_) {
    if (!file) continue;
    if (auto f = file->failure()) return f;
  }
  return std::nullopt;
}

std::optional<ChunkMeta> ChunkEngine::get_meta_locked(const ChunkId& id) {
  const Stripe& st = stripe(id);
  auto it = st.index.find(id);
  if (it == st.index.end()) return std::nullopt;
  return *it->second;
}

Result<std::optional<ChunkMeta>> ChunkEngine::get_meta(const ChunkId& id) {
  std::shared_lock lock(stripe(id).mu);
  return get_meta_locked(id);
}

Result<ChunkMeta> ChunkEngine::committed_meta(const ChunkId& id) {
  WEFT_TRY(auto meta, get_meta(id));
  if (!meta) return error(Code::kNotFound, "chunk {} not found", id);
  return *meta;
}

Result<ChunkInfo> ChunkEngine::stat(const ChunkId& id) {
  WEFT_TRY(auto meta, get_meta(id));
  uint64_t pending_version = 0;
  {
    std::lock_guard lock(pending_mu_);
    auto it = pending_.find(id);
    if (it != pending_.end()) pending_version = it->second.meta.version;
  }
  if (!meta) return error(Code::kNotFound, "chunk {} has no committed version", id);
  return ChunkInfo{id, meta->version, meta->length, meta->chunk_crc, meta->size_class, pending_version, meta->chain_id};
}

Result<std::vector<ChunkInfo>> ChunkEngine::list(std::optional<ChunkId> start, size_t count_max,
                                                 std::optional<ChunkId> end) {
  std::vector<ChunkInfo> out;
  // With an end, RocksDB stops there too (it would otherwise step over the
  // tombstones of removed chunks past it to find the next live key).
  const std::string upper = end ? chunk_key(*end) : std::string();
  const rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  if (end) ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  it->Seek(start ? chunk_key(*start) : std::string(1, kChunkKeyPrefix));
  // Ids from the index, records from the in-memory mirror (as list_chain):
  // a group's index record is written before its slots are flushed, and
  // reads serve a version only once the group is durable, so the listing
  // shows what a read would return. A chunk removed since is skipped.
  for (; it->Valid() && is_chunk_key(it->key()) && out.size() < count_max; it->Next()) {
    auto id = ChunkId::decode(std::string_view(it->key().data() + 1, ChunkId::kEncodedBytes));
    if (!id) return error(Code::kCorruption, "chunk index key of {} bytes", it->key().size());
    if (end && !(*id < *end)) break;
    WEFT_TRY(auto meta, get_meta(*id));
    if (!meta) continue;
    out.push_back(ChunkInfo{*id, meta->version, meta->length, meta->chunk_crc, meta->size_class, 0, meta->chain_id});
  }
  if (!it->status().ok()) return error(Code::kIoError, "scan chunk index: {}", it->status().ToString());
  return out;
}

namespace {

// One prefix of the per-chain index, positioned at its next chunk id.
struct ChainCursor {
  std::unique_ptr<rocksdb::Iterator> it;
  std::string prefix;
  std::optional<ChunkId> id;  // nullopt: exhausted

  void load() { id = it->Valid() ? chain_key_id(it->key(), prefix) : std::nullopt; }
  void next() {
    it->Next();
    load();
  }
};

}  // namespace

// Merges the chain's index with the unknown-chain index in id order; the
// records come from the in-memory mirror (a chunk removed since is skipped).
Result<std::vector<ChunkInfo>> ChunkEngine::list_chain(uint32_t chain_id, std::optional<ChunkId> start,
                                                       size_t count_max, std::optional<ChunkId> end) {
  std::vector<uint32_t> chains{chain_id};
  if (chain_id != kChainUnknown) chains.push_back(kChainUnknown);
  // Upper bounds (see list()); declared before the cursors, whose iterators point at them.
  std::string uppers[2];
  rocksdb::Slice upper_slices[2];
  std::vector<ChainCursor> cursors;
  for (size_t i = 0; i < chains.size(); ++i) {
    const uint32_t c = chains[i];
    rocksdb::ReadOptions ro;
    if (end) {
      uppers[i] = chain_key(c, *end);
      upper_slices[i] = rocksdb::Slice(uppers[i]);
      ro.iterate_upper_bound = &upper_slices[i];
    }
    ChainCursor cur{std::unique_ptr<rocksdb::Iterator>(db_->NewIterator(ro)), chain_prefix(c), {}};
    cur.it->Seek(start ? chain_key(c, *start) : cur.prefix);
    cur.load();
    cursors.push_back(std::move(cur));
  }
  std::vector<ChunkInfo> out;
  while (out.size() < count_max) {
    std::optional<ChunkId> low;
    for (auto& c : cursors)
      if (c.id && (!low || *c.id < *low)) low = c.id;
    if (!low || (end && !(*low < *end))) break;
    for (auto& c : cursors)
      if (c.id == low) c.next();  // an id in both (its chain was just recorded) is listed once
    WEFT_TRY(auto meta, get_meta(*low));
    if (!meta || (meta->chain_id != chain_id && meta->chain_id != kChainUnknown)) continue;
    out.push_back(ChunkInfo{*low, meta->version, meta->length, meta->chunk_crc, meta->size_class, 0, meta->chain_id});
  }
  for (auto& c : cursors)
    if (!c.it->status().ok()) return error(Code::kIoError, "scan chain index: {}", c.it->status().ToString());
  return out;
}

Result<std::vector<uint32_t>> ChunkEngine::chains() {
  std::vector<uint32_t> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  // Every key of the per-chain index is kChainKeyBytes long and starts with
  // the prefix and the big-endian chain id: seek to each chain's first key,
  // then past that chain.
  for (it->Seek(chain_prefix(kChainUnknown + 1)); it->Valid(); ) {
    rocksdb::Slice key = it->key();
    if (key.size() == 0 || key[0] != kChainKeyPrefix) break;
    if (key.size() != kChainKeyBytes) return error(Code::kCorruption, "chain index key of {} bytes", key.size());
    uint32_t chain = 0;
    for (int i = 1; i <= 4; ++i) chain = (chain << 8) | static_cast<uint8_t>(key[i]);
    out.push_back(chain);
    if (chain == UINT32_MAX) break;
    it->Seek(chain_prefix(chain + 1));
  }
  if (!it->status().ok()) return error(Code::kIoError, "scan chain index: {}", it->status().ToString());
  return out;
}

Result<uint64_t> ChunkEngine::index_bytes() {
  uint64_t total = 0;
  std::optional<ChunkId> start;
  for (;;) {
    WEFT_TRY(auto page, list(start, 1024));
    for (const auto& c : page)
      if (c.length > 0) total += class_bytes(c.size_class);  // an empty chunk holds no slot
    if (page.size() < 1024) return total;
    start = page.back().id.successor();
    if (!start) return total;  // the largest id was the last
  }
}

}  // namespace weft::storage
