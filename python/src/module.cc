// weft._native: the pybind11 binding of libweft (include/weft/client.h).
//
// Thin on purpose: the Python side (python/weft/__init__.py) builds the file
// objects, stat results and the API. Rules kept here:
//   - every call that may touch the network releases the GIL;
//   - errors become OSError(errno, message, path), so Python picks the
//     subclass (FileNotFoundError, PermissionError...) from the errno;
//   - fork(): in a child the client's threads do not exist. A fork generation
//     (bumped by pthread_atfork in the child) tells each object whether it was
//     made in this process; an object from before the fork is leaked, never
//     destroyed (its destructor would join threads that are gone and take
//     locks that may be held forever), and a Client reconnects lazily;
//   - interpreter exit: a daemon thread still inside a call when Python
//     finalizes would be ended (pthread_exit) by re-taking the GIL, and that
//     unwinding through a C++ destructor aborts the process. An atexit hook
//     (the last Python code before finalization) makes every other thread
//     that leaves or enters a call from then on wait forever without the GIL
//     instead (the process is ending; Python 3.14 does the same to its own
//     threads), and waits for those already re-taking the GIL. See GilRelease.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

// g++ 12 at -O2 reports false "may be used uninitialized" warnings on moves
// out of std::expected (seen on Result<std::vector<DirEntry>>).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "weft/client.h"

namespace py = pybind11;

namespace {

using weft::Code;
using weft::Status;

std::atomic<uint64_t> g_fork_generation{0};
// Interpreter exit (at_exit): set by the atexit hook; threads re-taking the
// GIL at that moment (counted) are let through first.
std::atomic<bool> g_exiting{false};
std::atomic<std::thread::id> g_exit_thread{};
std::atomic<int> g_reacquiring{0};

void after_fork_in_child() {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  g_reacquiring.store(0);  // the parent's threads do not exist here
}
uint64_t fork_generation() { return g_fork_generation.load(std::memory_order_relaxed); }

// After the atexit hook, every thread but the one finalizing Python.
bool must_park() { return g_exiting.load() && std::this_thread::get_id() != g_exit_thread.load(); }

[[noreturn]] void park_forever() {
  for (;;) pause();
}

// py::gil_scoped_release, made safe at interpreter exit: a thread that would
// take the GIL again after the atexit hook (when Python may be finalizing:
// PyEval_RestoreThread would end the thread by unwinding through this
// noexcept destructor, and std::terminate aborts the process) waits forever
// without it instead; so does one starting a call then (it has released the
// GIL first). The finalizing thread itself goes on.
class GilRelease {
 public:
  GilRelease() {
    if (must_park()) {
      PyEval_SaveThread();
      park_forever();
    }
    state_ = PyEval_SaveThread();
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;
  ~GilRelease() {
    // Counted before the check, so that the hook, which sets g_exiting before
    // reading the count, either is seen here or waits for this thread.
    g_reacquiring.fetch_add(1);
    if (must_park()) {
      g_reacquiring.fetch_sub(1);
      park_forever();
    }
    PyEval_RestoreThread(state_);
    g_reacquiring.fetch_sub(1);
  }

 private:
  PyThreadState* state_ = nullptr;
};

// The atexit hook (registered when the module loads; runs with the GIL, after
// Python joined its non-daemon threads and before it finalizes).
void at_exit() {
  g_exit_thread.store(std::this_thread::get_id());
  g_exiting.store(true);
  if (g_reacquiring.load() == 0) return;
  PyThreadState* state = PyEval_SaveThread();
  // They only wait for the GIL, now free; bounded all the same.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (g_reacquiring.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  PyEval_RestoreThread(state);
}

// Names are bytes (a name need not be UTF-8): the Python side passes paths
// as bytes (os.fsencode) and gets names as bytes, decoding them as os does.
// A path shown to Python (error filename, File.path) is decoded as
// os.fsdecode does (surrogateescape: it encodes back to the same bytes), and
// a message (which may quote a name) with backslash escapes.
py::str fs_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeFSDefaultAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::str message_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// (errno, message) for a failed item of a batch.
py::tuple error_tuple(const Status& s) { return py::make_tuple(s.posix_errno(), message_str(s.message())); }

// Raises OSError(errno, "<strerror> (<weft message>)", path[, None, path2]).
// Needs the GIL.
[[noreturn]] void raise_status(const Status& s, const std::string& path, const std::string* path2 = nullptr) {
  int err = s.posix_errno();
  if (err == 0) err = EIO;
  std::string text = std::strerror(err);
  if (!s.message().empty()) text += " (" + s.message() + ")";
  py::object os_error = py::reinterpret_borrow<py::object>(PyExc_OSError);
  py::object exc = path2          ? os_error(err, message_str(text), fs_str(path), py::none(), fs_str(*path2))
                   : path.empty() ? os_error(err, message_str(text))
                                  : os_error(err, message_str(text), fs_str(path));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

[[noreturn]] void raise_errno(int err, const std::string& message, const std::string& path) {
  raise_status(Status(weft::code_from_errno(err), message), path);
}

// An offset or length given by Python for a uint64_t. Taken as any object
// rather than converted by pybind11, which refuses a negative int or one past
// 64 bits only with "incompatible function arguments" (a TypeError for a
// value of the right type). As os.pread and io's files: an int or anything
// with __index__ (numpy integers), else TypeError; a negative one is OSError
// EINVAL, one past 64 bits OverflowError. A path "" (a batch read names
// none): the OSError has no filename.
uint64_t u64_arg(py::handle arg, const char* what, const std::string& path) {
  auto v = py::reinterpret_steal<py::object>(PyNumber_Index(arg.ptr()));
  if (!v) throw py::error_already_set();
  int overflow = 0;
  const long long s = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (s == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow < 0 || (overflow == 0 && s < 0)) raise_errno(EINVAL, std::string("negative ") + what, path);
  if (overflow == 0) return static_cast<uint64_t>(s);
  const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw py::error_already_set();  // OverflowError
  return u;
}

template <class T>
T check(weft::Result<T>&& r, const std::string& path) {
  if (!r) raise_status(r.error(), path);
  if constexpr (!std::is_void_v<T>) return std::move(*r);
}

// A contiguous view of a Python buffer, released on destruction (needs the GIL then).
class BufferView {
 public:
  BufferView(py::handle obj, bool writable) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      // As io's readinto: a read-only buffer is the wrong type of argument.
      if (writable && PyErr_ExceptionMatches(PyExc_BufferError)) {
        PyErr_Clear();
        throw py::type_error(std::string("argument must be read-write bytes-like object, not ") +
                             Py_TYPE(obj.ptr())->tp_name);
      }
      throw py::error_already_set();
    }
    held_ = true;
  }
  BufferView(BufferView&& o) noexcept : view_(o.view_), held_(o.held_) { o.held_ = false; }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  BufferView& operator=(BufferView&&) = delete;
  ~BufferView() {
    if (held_) PyBuffer_Release(&view_);
  }
  std::byte* data() const { return static_cast<std::byte*>(view_.buf); }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

using LayoutTuple = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t, uint64_t>;

LayoutTuple to_tuple(const weft::Layout& l) {
  return {l.chunk_bytes, l.stripe_count, l.chain_table_id, l.first_chain, l.shuffle_seed};
}
weft::Layout from_tuple(const LayoutTuple& t) {
  weft::Layout l;
  l.chunk_bytes = std::get<0>(t);
  l.stripe_count = std::get<1>(t);
  l.chain_table_id = std::get<2>(t);
  l.first_chain = std::get<3>(t);
  l.shuffle_seed = std::get<4>(t);
  return l;
}

// Parent directory path and last component of an absolute cluster path.
std::pair<std::string, std::string> split_parent(const std::string& path) {
  auto parts = weft::split_path(path);
  if (!parts) raise_status(parts.error(), path);
  if (parts->empty()) raise_errno(EINVAL, "the root has no parent", path);
  std::string parent;
  for (size_t i = 0; i + 1 < parts->size(); ++i) parent += "/" + (*parts)[i];
  if (parent.empty()) parent = "/";
  return {parent, parts->back()};
}

// The connection, shared by the files opened through it (a File needs its
// client's threads).
struct Conn {
  std::unique_ptr<weft::Client> client;
  uint64_t generation = 0;
};

// Leaks a shared_ptr when it comes from before a fork.
template <class T>
void drop(std::shared_ptr<T>& p, uint64_t generation) {
  if (p && generation != fork_generation()) new std::shared_ptr<T>(std::move(p));  // NOLINT: leaked on purpose
  p.reset();
}

class PyFile {
 public:
  PyFile(std::shared_ptr<Conn> conn, std::shared_ptr<weft::File> file, std::string path)
      : conn_(std::move(conn)), file_(std::move(file)), path_(std::move(path)), generation_(fork_generation()) {}
  PyFile(const PyFile&) = delete;
  PyFile& operator=(const PyFile&) = delete;
  ~PyFile() {
    // The native File closes itself when dropped (flushing its data); a file
    // from before a fork is leaked.
    if (generation_ != fork_generation()) {
      drop(file_, generation_);
      drop(conn_, generation_);
      return;
    }
    if (file_) {
      GilRelease nogil;
      file_.reset();
      conn_.reset();
    }
  }

  size_t pread(py::handle buffer, py::handle offset_arg) {
    auto f = usable();
    const uint64_t offset = u64_arg(offset_arg, "offset", path_);
    BufferView b(buffer, true);
    weft::Result<size_t> r;
    {
      GilRelease nogil;
      r = f->pread(std::span<std::byte>(b.data(), b.size()), offset);
    }
    return check(std::move(r), path_);
  }

  // pread into a new bytes object of `n` bytes, shrunk to what was read: a
  // large read is not copied a second time (readall).
  py::bytes pread_bytes(py::handle length, py::handle offset_arg) {
    auto f = usable();
    const uint64_t n = u64_arg(length, "length", path_);
    const uint64_t offset = u64_arg(offset_arg, "offset", path_);
    // As os.read: OverflowError (EOVERFLOW became EIO on the way through Status).
    if (n > static_cast<uint64_t>(PY_SSIZE_T_MAX)) {
      PyErr_SetString(PyExc_OverflowError, "read length too large");
      throw py::error_already_set();
    }
    PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
    if (raw == nullptr) throw py::error_already_set();
    auto out = py::reinterpret_steal<py::bytes>(raw);
    weft::Result<size_t> r;
    {
      GilRelease nogil;  // nobody else can see the object yet
      r = f->pread(std::span<std::byte>(reinterpret_cast<std::byte*>(PyBytes_AS_STRING(raw)), n), offset);
    }
    const size_t got = check(std::move(r), path_);
    if (got == n) return out;
    PyObject* shrunk = out.release().ptr();
    if (_PyBytes_Resize(&shrunk, static_cast<Py_ssize_t>(got)) != 0) throw py::error_already_set();  // freed it
    return py::reinterpret_steal<py::bytes>(shrunk);
  }

  size_t pwrite(py::handle buffer, py::handle offset_arg) {
    auto f = usable();
    const uint64_t offset = u64_arg(offset_arg, "offset", path_);
    BufferView b(buffer, false);
    weft::Result<size_t> r;
    {
      GilRelease nogil;
      r = f->pwrite(std::span<const std::byte>(b.data(), b.size()), offset);
    }
    return check(std::move(r), path_);
  }

  uint64_t size() { return usable()->size(); }
  uint64_t refresh_size() {
    auto f = usable();
    weft::Result<uint64_t> r;
    {
      GilRelease nogil;
      r = f->refresh_size();
    }
    return check(std::move(r), path_);
  }
  void flush() { call_void([](weft::File& f) { return f.flush(); }); }
  void fsync() { call_void([](weft::File& f) { return f.fsync(); }); }
  void truncate(py::handle length_arg) {
    const uint64_t length = u64_arg(length_arg, "length", path_);
    call_void([length](weft::File& f) { return f.truncate(length); });
  }

  // Idempotent; a file from before a fork is just forgotten.
  void close() {
    if (!file_) return;
    if (generation_ != fork_generation()) {
      drop(file_, generation_);
      drop(conn_, generation_);
      return;
    }
    std::shared_ptr<weft::File> f = std::move(file_);
    weft::Result<void> r;
    {
      GilRelease nogil;
      r = f->close();
      f.reset();
      conn_.reset();
    }
    check(std::move(r), path_);
  }

  bool closed() const { return !file_; }
  bool readable() { return usable()->readable(); }
  bool writable() { return usable()->writable(); }
  uint64_t ino() { return usable()->ino(); }
  LayoutTuple layout() { return to_tuple(usable()->layout()); }
  py::str path() const { return fs_str(path_); }

 private:
  std::shared_ptr<weft::File> usable() {
    if (!file_) raise_errno(EBADF, "I/O operation on a closed weft file", path_);
    if (generation_ != fork_generation())
      raise_errno(EBADF, "this weft file was opened before fork(); open it again in this process", path_);
    return file_;
  }
  template <class F>
  void call_void(F fn) {
    auto f = usable();
    weft::Result<void> r;
    {
      GilRelease nogil;
      r = fn(*f);
    }
    check(std::move(r), path_);
  }

  std::shared_ptr<Conn> conn_;
  std::shared_ptr<weft::File> file_;
  std::string path_;
  uint64_t generation_;
};

// One read of read_batch: (ino, offset, buffer, Inode or layout or None, file
// size or None); the offset as File.pread takes it (u64_arg). An Inode (from
// stat or scandir) gives layout and size and has the read permission
// checked; a layout and a size are read as given.
using ReadSpec = std::tuple<uint64_t, py::object, py::object, std::optional<std::variant<weft::Inode, LayoutTuple>>,
                            std::optional<uint64_t>>;

class PyClient {
 public:
  // call_timeout, retry_time: seconds, 0 = libweft's default.
  PyClient(std::string config, std::string cluster, size_t io_threads, size_t write_buffer_bytes, std::string name,
           double statahead_ttl, double call_timeout, double retry_time, bool hold_open_files,
           int64_t early_read_bytes) {
    if (!(statahead_ttl >= 0 && statahead_ttl <= 86400))
      throw py::value_error("statahead_ttl must be between 0 and 86400 seconds");
    if (early_read_bytes < -1) throw py::value_error("early_read_bytes must be >= 0 (or -1: the default)");
    // libweft refuses more too (OSError EINVAL); a ValueError, as for the
    // other arguments.
    if (io_threads > weft::ClientOptions::kIoThreadsMax)
      throw py::value_error("io_threads must be between 0 and " + std::to_string(weft::ClientOptions::kIoThreadsMax));
    if (early_read_bytes >= 0) options_.early_read_bytes_max = static_cast<size_t>(early_read_bytes);
    if (!(call_timeout >= 0 && call_timeout <= 3600))
      throw py::value_error("call_timeout must be between 0 and 3600 seconds");
    if (!(retry_time >= 0 && retry_time <= 86400))
      throw py::value_error("retry_time must be between 0 and 86400 seconds");
    options_.statahead_ttl_s = statahead_ttl;
    options_.hold_open_files = hold_open_files;
    if (call_timeout > 0) options_.call_timeout_ms = std::max<uint32_t>(1, static_cast<uint32_t>(call_timeout * 1000));
    if (retry_time > 0) options_.retry_time_ms_max = std::max<uint32_t>(1, static_cast<uint32_t>(retry_time * 1000));
    options_.config_path = std::move(config);
    options_.cluster = std::move(cluster);
    if (io_threads > 0) options_.io_threads = io_threads;
    if (write_buffer_bytes > 0) options_.write_buffer_bytes = write_buffer_bytes;
    options_.name = std::move(name);
    (void)conn();  // connect now: configuration errors surface at connect()
  }
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;
  ~PyClient() {
    if (!conn_) return;
    if (conn_->generation != fork_generation()) {
      drop(conn_, conn_->generation);
      return;
    }
    GilRelease nogil;
    conn_.reset();
  }

  std::string description() { return conn()->client->cluster_description(); }
  // weft::Client::stats() of this process's connection, as a dict.
  py::dict stats() {
    const weft::Client::Stats st = conn()->client->stats();
    py::dict d;
    d["early_reads"] = st.early_reads;
    d["early_reads_kept"] = st.early_reads_kept;
    return d;
  }

  // ---- files ----
  std::unique_ptr<PyFile> open(const std::string& path, int flags, uint32_t mode) {
    auto c = conn();
    weft::Result<std::shared_ptr<weft::File>> r;
    {
      GilRelease nogil;
      r = c->client->open_path(c->client->default_cred(), path, flags, mode);
    }
    return std::make_unique<PyFile>(c, check(std::move(r), path), path);
  }

  // ---- namespace ----
  weft::Inode stat(const std::string& path, bool follow) {
    auto c = conn();
    weft::Result<weft::Inode> r;
    {
      GilRelease nogil;
      r = c->client->resolve(c->client->default_cred(), path, follow);
    }
    return check(std::move(r), path);
  }

  // One resolve per path, in order; an error is (errno, message).
  py::list stat_many(const std::vector<std::string>& paths, bool follow) {
    auto c = conn();
    std::vector<weft::Result<weft::Inode>> out;
    out.reserve(paths.size());
    {
      GilRelease nogil;
      for (const auto& p : paths) out.push_back(c->client->resolve(c->client->default_cred(), p, follow));
    }
    py::list result;
    for (auto& r : out) {
      if (r) result.append(py::cast(std::move(*r)));
      else result.append(error_tuple(r.error()));
    }
    return result;
  }

  bool exists(const std::string& path, bool follow) {
    auto c = conn();
    weft::Result<weft::Inode> r;
    {
      GilRelease nogil;
      r = c->client->resolve(c->client->default_cred(), path, follow);
    }
    if (r) return true;
    if (r.error().code() == Code::kNotFound || r.error().code() == Code::kNotDirectory) return false;
    raise_status(r.error(), path);
  }

  // Entries of a directory: (name as bytes, inode number, InodeType as int,
  // Inode or None), in the directory's order. None: meta gave no attributes
  // (the caller may read the directory but not search it).
  py::list scandir(const std::string& path) {
    auto c = conn();
    weft::Result<std::vector<weft::DirEntry>> r;
    {
      GilRelease nogil;
      r = c->client->list_path(c->client->default_cred(), path);
    }
    if (!r) raise_status(r.error(), path);
    py::list out;
    for (auto& e : *r) {
      py::object attr = e.attr.ino != 0 ? py::cast(std::move(e.attr)) : py::none();
      out.append(py::make_tuple(py::bytes(e.name), e.ino, static_cast<int>(e.type), std::move(attr)));
    }
    return out;
  }

  // Names (bytes) of a directory's entries.
  py::list listdir(const std::string& path) {
    auto c = conn();
    weft::Result<std::vector<weft::DirEntry>> r;
    {
      GilRelease nogil;
      r = c->client->list_path(c->client->default_cred(), path);
    }
    if (!r) raise_status(r.error(), path);
    py::list out;
    for (auto& e : *r) out.append(py::bytes(e.name));
    return out;
  }

  void mkdirs(const std::string& path, uint32_t mode) {
    auto c = conn();
    weft::Result<void> r;
    {
      GilRelease nogil;
      r = c->client->mkdirs(c->client->default_cred(), path, mode);
    }
    check(std::move(r), path);
  }

  void mkdir(const std::string& path, uint32_t mode) {
    (void)split_parent(path);  // the root: EINVAL, as before
    auto c = conn();
    weft::Result<weft::Inode> r;
    {
      GilRelease nogil;  // checked by meta as a remove is (Client::mkdir_path)
      r = c->client->mkdir_path(c->client->default_cred(), path, mode);
    }
    check(std::move(r), path);
  }

  // kind: 0 = file or symlink (unlink: EISDIR on a directory), 1 = empty directory (ENOTDIR on others).
  // Through libweft's path calls: meta checks that no directory on the way
  // moved since the client cached it (a remove could land in a moved tree).
  void remove(const std::string& path, bool directory) {
    (void)split_parent(path);  // the root: EINVAL, as before
    auto c = conn();
    weft::Result<void> r;
    {
      GilRelease nogil;
      const auto& cred = c->client->default_cred();
      r = directory ? c->client->rmdir_path(cred, path) : c->client->unlink_path(cred, path);
    }
    check(std::move(r), path);
  }

  // rm -r by inode from the path's parent (Client::remove_tree): the first
  // error is raised once the walk removed everything else it could.
  void remove_tree(const std::string& path) {
    auto c = conn();
    weft::Result<void> r;
    {
      GilRelease nogil;
      r = c->client->remove_tree(c->client->default_cred(), path);
    }
    check(std::move(r), path);
  }

  // flags: 0 replace, 1 no-replace, 2 exchange.
  void rename(const std::string& from, const std::string& to, uint32_t flags) {
    (void)split_parent(from);  // the root: EINVAL, as before
    (void)split_parent(to);
    auto c = conn();
    weft::Result<void> r;
    {
      GilRelease nogil;  // both ways looked up afresh; "f/" names a directory (ENOTDIR)
      r = c->client->rename_path(c->client->default_cred(), from, to, static_cast<weft::RenameFlags>(flags));
    }
    if (!r) raise_status(r.error(), from, &to);
  }

  void symlink(const std::string& target, const std::string& path) {
    (void)split_parent(path);  // the root: EINVAL, as before
    auto c = conn();
    weft::Result<weft::Inode> r;
    {
      GilRelease nogil;  // checked by meta as a remove is (Client::symlink_path)
      r = c->client->symlink_path(c->client->default_cred(), target, path);
    }
    check(std::move(r), path);
  }

  // The target, as bytes.
  py::bytes readlink(const std::string& path) {
    auto c = conn();
    weft::Result<std::string> r;
    {
      GilRelease nogil;
      r = [&]() -> weft::Result<std::string> {
        WEFT_TRY(weft::Inode n, c->client->resolve(c->client->default_cred(), path, false));
        if (!n.is_symlink()) return weft::error(Code::kInvalidArgument, "not a symbolic link");
        return c->client->readlink(c->client->default_cred(), n.ino);
      }();
    }
    return py::bytes(check(std::move(r), path));
  }

  LayoutTuple get_layout(const std::string& path) {
    auto c = conn();
    weft::Result<weft::Layout> r;
    {
      GilRelease nogil;
      r = [&]() -> weft::Result<weft::Layout> {
        WEFT_TRY(weft::Inode n, c->client->resolve(c->client->default_cred(), path, true));
        if (!n.is_dir()) return n.layout;
        return c->client->get_layout(c->client->default_cred(), n.ino);
      }();
    }
    return to_tuple(check(std::move(r), path));
  }

  void set_layout(const std::string& path, const LayoutTuple& layout) {
    auto c = conn();
    weft::Result<void> r;
    {
      GilRelease nogil;
      r = [&]() -> weft::Result<void> {
        WEFT_TRY(weft::Inode n, resolve_dir(*c->client, path));
        return c->client->set_layout(c->client->default_cred(), n.ino, from_tuple(layout));
      }();
    }
    check(std::move(r), path);
  }

  // ---- batches ----
  // Reads every spec into its (writable, contiguous) buffer, as one batched
  // request. Returns, in order, the bytes read or (errno, message).
  py::list read_batch(const std::vector<ReadSpec>& specs) {
    auto c = conn();
    std::vector<BufferView> views;
    std::vector<weft::ReadOp> ops;
    views.reserve(specs.size());
    ops.reserve(specs.size());
    for (const auto& [ino, offset, buffer, layout, size] : specs) {
      views.emplace_back(buffer, true);
      weft::ReadOp op;
      op.ino = ino;
      op.offset = u64_arg(offset, "offset", "");
      op.dst = std::span<std::byte>(views.back().data(), views.back().size());
      if (layout && std::holds_alternative<weft::Inode>(*layout)) {
        op.attrs = std::get<weft::Inode>(*layout);
      } else if (layout) {
        op.layout = from_tuple(std::get<LayoutTuple>(*layout));
      }
      op.file_size = size;
      ops.push_back(std::move(op));
    }
    std::vector<weft::Result<size_t>> results;
    {
      GilRelease nogil;
      results = c->client->read_batch(c->client->default_cred(), ops);
    }
    py::list out;
    for (auto& r : results) {
      if (r) out.append(*r);
      else out.append(error_tuple(r.error()));
    }
    return out;
  }

 private:
  // The live connection of this process (reconnects after a fork).
  std::shared_ptr<Conn> conn() {
    if (conn_ && conn_->generation == fork_generation()) return conn_;
    if (conn_) drop(conn_, conn_->generation);
    weft::Result<std::unique_ptr<weft::Client>> r;
    {
      GilRelease nogil;
      r = weft::Client::connect(options_);
    }
    if (!r) {
      std::string where = !options_.cluster.empty() ? options_.cluster : options_.config_path;
      if (where.empty()) {
        const char* env = std::getenv("WEFT_CONFIG");
        where = env && *env ? env : "./weft-data/client.toml";
      }
      raise_status(r.error(), where);
    }
    auto c = std::make_shared<Conn>();
    c->client = std::move(*r);
    c->generation = fork_generation();
    if (conn_ && conn_->generation == fork_generation()) {
      // Another thread connected meanwhile: keep its connection.
      GilRelease nogil;
      c.reset();
      return conn_;
    }
    conn_ = c;
    return conn_;
  }

  static weft::Result<weft::Inode> resolve_dir(weft::Client& client, const std::string& path) {
    WEFT_TRY(weft::Inode n, client.resolve(client.default_cred(), path, true));
    if (!n.is_dir()) return weft::error(Code::kNotDirectory, "{} is not a directory", path);
    return n;
  }

  weft::ClientOptions options_;
  std::shared_ptr<Conn> conn_;
};

// An Inode's pickled state: every field, so the copy reads and checks as the
// original (datasets hold Inodes and go to DataLoader workers by pickle).
py::tuple inode_state(const weft::Inode& n) {
  return py::make_tuple(n.ino, static_cast<int>(n.type), n.mode, n.uid, n.gid, n.nlink, n.size, n.atime_ns,
                        n.mtime_ns, n.ctime_ns, n.parent, to_tuple(n.layout), py::bytes(n.symlink_target), n.rdev);
}

weft::Inode inode_from_state(const py::tuple& t) {
  if (t.size() != 14)
    throw py::value_error("weft Inode: pickled state has " + std::to_string(t.size()) + " fields, not 14");
  weft::Inode n;
  n.ino = t[0].cast<uint64_t>();
  int type = t[1].cast<int>();
  if (type < 1 || type > weft::meta::kInodeTypeMax)
    throw py::value_error("weft Inode: pickled type " + std::to_string(type) + " is not a known type");
  n.type = static_cast<weft::InodeType>(type);
  n.mode = t[2].cast<uint32_t>();
  n.uid = t[3].cast<uint32_t>();
  n.gid = t[4].cast<uint32_t>();
  n.nlink = t[5].cast<uint32_t>();
  n.size = t[6].cast<uint64_t>();
  n.atime_ns = t[7].cast<int64_t>();
  n.mtime_ns = t[8].cast<int64_t>();
  n.ctime_ns = t[9].cast<int64_t>();
  n.parent = t[10].cast<uint64_t>();
  n.layout = from_tuple(t[11].cast<LayoutTuple>());
  n.symlink_target = t[12].cast<std::string>();
  n.rdev = t[13].cast<uint64_t>();
  return n;
}

// __reduce__ of File and Client: they cannot be pickled. Without it pickle
// protocols 0 and 1 (copyreg._reduce_ex), or a call of x.__reduce__(), call
// pybind11_object(x), which aborts the process (std::terminate: "no
// pybind11-registered base types").
[[noreturn]] void refuse_reduce(const py::handle& self) {
  throw py::type_error("cannot pickle '" + std::string(Py_TYPE(self.ptr())->tp_name) + "' object");
}

// The tp_new of File, Inode and Client. pybind11's own makes an instance
// whose C++ object is allocated, uninitialized, at its first use: a method of
// T.__new__(T) read garbage (a shared_ptr, a std::string) and could crash
// the interpreter, and __init__ or __setstate__ called again on a live one
// leaked it. Instances come only from this module's functions, which
// pybind11 builds without tp_new.
PyObject* refuse_new(PyTypeObject* type, PyObject*, PyObject*) {
  PyErr_Format(PyExc_TypeError, "cannot create '%s' instances (made by weft only)", type->tp_name);
  return nullptr;
}

void refuse_new_for(const py::handle& cls) {
  // T.__new__ of its own (else pybind11_object's, whose refusal reads "not
  // safe"), then the slot itself: setting __new__ made it a call of that
  // attribute, which pybind11_object.__new__(T) would get around.
  const std::string name = py::str(cls.attr("__name__"));
  cls.attr("__new__") = py::cpp_function([name](const py::args&, const py::kwargs&) -> py::object {
    throw py::type_error("cannot create 'weft._native." + name + "' instances (made by weft only)");
  });
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  type->tp_new = refuse_new;
  PyType_Modified(type);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "libweft, the native client of a Weft cluster (use the weft package, not this module)";
  static bool atfork_registered = [] { return pthread_atfork(nullptr, nullptr, after_fork_in_child) == 0; }();
  (void)atfork_registered;
  py::module_::import("atexit").attr("register")(py::cpp_function(&at_exit));

  m.attr("O_RDONLY") = O_RDONLY;
  m.attr("O_WRONLY") = O_WRONLY;
  m.attr("O_RDWR") = O_RDWR;
  m.attr("O_CREAT") = O_CREAT;
  m.attr("O_EXCL") = O_EXCL;
  m.attr("O_TRUNC") = O_TRUNC;
  m.attr("O_APPEND") = O_APPEND;
  m.attr("ROOT_INO") = weft::kRootIno;
  m.attr("TYPE_FILE") = static_cast<int>(weft::InodeType::kFile);
  m.attr("TYPE_DIRECTORY") = static_cast<int>(weft::InodeType::kDirectory);
  m.attr("TYPE_SYMLINK") = static_cast<int>(weft::InodeType::kSymlink);
  m.attr("RENAME_REPLACE") = 0;
  m.attr("RENAME_NOREPLACE") = static_cast<int>(weft::RenameFlags::kNoReplace);
  m.attr("RENAME_EXCHANGE") = static_cast<int>(weft::RenameFlags::kExchange);
  m.def("fork_generation", &fork_generation, "How many fork()s this process is away from where the module loaded.");
  m.def("exiting", [] { return g_exiting.load(); },
        "True once the interpreter exits (after the module's atexit hook): only the exiting thread may still "
        "make calls, any other waits forever.");

  py::class_<weft::Inode> inode_class(m, "Inode");
  inode_class
      .def_readonly("ino", &weft::Inode::ino)
      .def_property_readonly("type", [](const weft::Inode& n) { return static_cast<int>(n.type); })
      .def_readonly("mode", &weft::Inode::mode)
      .def_readonly("uid", &weft::Inode::uid)
      .def_readonly("gid", &weft::Inode::gid)
      .def_readonly("nlink", &weft::Inode::nlink)
      .def_readonly("size", &weft::Inode::size)
      .def_readonly("atime_ns", &weft::Inode::atime_ns)
      .def_readonly("mtime_ns", &weft::Inode::mtime_ns)
      .def_readonly("ctime_ns", &weft::Inode::ctime_ns)
      .def_readonly("rdev", &weft::Inode::rdev)
      .def_property_readonly("layout", [](const weft::Inode& n) { return to_tuple(n.layout); })
      .def("is_dir", &weft::Inode::is_dir)
      .def("is_file", &weft::Inode::is_file)
      .def("is_symlink", &weft::Inode::is_symlink)
      .def("__repr__",
           [](const weft::Inode& n) {
             return "<weft Inode " + std::to_string(n.ino) + " type " + std::to_string(static_cast<int>(n.type)) +
                    " size " + std::to_string(n.size) + ">";
           })
      // Datasets hold Inodes and go to DataLoader workers by pickle (spawn,
      // forkserver). Rebuilt by weft._inode_from_state (not __setstate__,
      // which needs Inode.__new__: see refuse_new; a Python function, as
      // pickle cannot name a pybind11 one).
      .def("__reduce__", [](const weft::Inode& n) {
        return py::make_tuple(py::module_::import("weft").attr("_inode_from_state"),
                              py::make_tuple(inode_state(n)));
      });
  m.def("_inode_from_state", &inode_from_state, py::arg("state"), "Unpickles an Inode.");
  refuse_new_for(inode_class);

  py::class_<PyFile> file_class(m, "File");
  file_class.def("pread", &PyFile::pread, py::arg("buffer"), py::arg("offset"),
           "Reads into a writable contiguous buffer at offset; returns the bytes read (short only at EOF).")
      .def("pread_bytes", &PyFile::pread_bytes, py::arg("length"), py::arg("offset"))
      .def("pwrite", &PyFile::pwrite, py::arg("buffer"), py::arg("offset"))
      .def("size", &PyFile::size)
      .def("refresh_size", &PyFile::refresh_size)
      .def("flush", &PyFile::flush)
      .def("fsync", &PyFile::fsync)
      .def("truncate", &PyFile::truncate, py::arg("length"))
      .def("close", &PyFile::close)
      .def_property_readonly("closed", &PyFile::closed)
      .def_property_readonly("readable", &PyFile::readable)
      .def_property_readonly("writable", &PyFile::writable)
      .def_property_readonly("ino", &PyFile::ino)
      .def_property_readonly("layout", &PyFile::layout)
      .def_property_readonly("path", &PyFile::path)
      .def("__reduce__", &refuse_reduce);
  refuse_new_for(file_class);

  // Made by connect(), not Client(...): a constructor needs Client.__new__ (see refuse_new).
  py::class_<PyClient> client_class(m, "Client");
  client_class.def("description", &PyClient::description)
      .def("stats", &PyClient::stats)
      .def("open", &PyClient::open, py::arg("path"), py::arg("flags"), py::arg("mode") = 0644)
      .def("stat", &PyClient::stat, py::arg("path"), py::arg("follow") = true)
      .def("stat_many", &PyClient::stat_many, py::arg("paths"), py::arg("follow") = true)
      .def("exists", &PyClient::exists, py::arg("path"), py::arg("follow") = true)
      .def("scandir", &PyClient::scandir, py::arg("path"))
      .def("listdir", &PyClient::listdir, py::arg("path"))
      .def("mkdirs", &PyClient::mkdirs, py::arg("path"), py::arg("mode") = 0755)
      .def("mkdir", &PyClient::mkdir, py::arg("path"), py::arg("mode") = 0755)
      .def("remove", &PyClient::remove, py::arg("path"), py::arg("directory") = false)
      .def("remove_tree", &PyClient::remove_tree, py::arg("path"))
      .def("rename", &PyClient::rename, py::arg("src"), py::arg("dst"), py::arg("flags") = 0)
      .def("symlink", &PyClient::symlink, py::arg("target"), py::arg("path"))
      .def("readlink", &PyClient::readlink, py::arg("path"))
      .def("get_layout", &PyClient::get_layout, py::arg("path"))
      .def("set_layout", &PyClient::set_layout, py::arg("path"), py::arg("layout"))
      .def("read_batch", &PyClient::read_batch, py::arg("specs"))
      .def("__reduce__", &refuse_reduce);  // weft.Client pickles (its arguments); this does not
  refuse_new_for(client_class);
  m.def(
      "connect",
      [](std::string config, std::string cluster, size_t io_threads, size_t write_buffer_bytes, std::string name,
         double statahead_ttl, double call_timeout, double retry_time, bool hold_open_files, int64_t early_read_bytes) {
        return std::make_unique<PyClient>(std::move(config), std::move(cluster), io_threads, write_buffer_bytes,
                                          std::move(name), statahead_ttl, call_timeout, retry_time, hold_open_files,
                                          early_read_bytes);
      },
      py::arg("config") = "", py::arg("cluster") = "", py::arg("io_threads") = 0, py::arg("write_buffer_bytes") = 0,
      py::arg("name") = "weft-python", py::arg("statahead_ttl") = 0.0, py::arg("call_timeout") = 0.0,
      py::arg("retry_time") = 0.0, py::arg("hold_open_files") = true, py::arg("early_read_bytes") = -1,
      "A connected Client.");
}
