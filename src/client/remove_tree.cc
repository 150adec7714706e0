#include "client/remove_tree.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_set>
#include <vector>

namespace weft::client {
namespace {

// The walk keeps its own stack (one frame per directory being emptied, on
// the heap): a tree of any depth is removed without recursion, so a very
// deep one cannot overflow the caller's stack.
class TreeRemover {
 public:
  TreeRemover(Client& client, const Cred& cred, const TreeErrorFn& on_error)
      : client_(client), cred_(cred), on_error_(on_error) {}

  // False when something under or at `name` stayed.
  bool remove(Ino parent, const std::string& name, const std::string& shown) {
    auto n = client_.lookup(cred_, parent, name);
    if (!n) return failed(shown, n.error());
    if (!n->is_dir()) return unlink(parent, name, shown);
    push(Frame{parent, name, shown, n->ino});
    bool top_ok = false;
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.next < f.page.size()) {
        const DirEntry& e = f.page[f.next++];
        if (e.name == "." || e.name == "..") continue;
        step_into(f, e.name);
        continue;
      }
      if (!f.eof) {
        // Page by page: removing entries does not disturb the cookie (meta
        // resumes strictly after a name, gone or not).
        auto page = client_.readdir(cred_, f.ino, f.cookie, 1024);
        if (page) {
          f.page = std::move(page->entries);
          f.next = 0;
          f.eof = page->eof || f.page.empty();
          f.cookie = std::move(page->cookie);
          continue;
        }
        if (gone(page.error())) {  // removed under us: nothing left to do here
          top_ok = finish(f.ok);
          continue;
        }
        // As rm(1): a directory that cannot be listed (no read permission)
        // may be empty all the same, so it is removed if rmdir can; if not,
        // the listing's error is the one named when rmdir's only says that
        // the directory holds something (ENOTEMPTY), else rmdir's own (EPERM
        // of a sticky parent, say).
        Frame unread = std::move(f);
        auto r = client_.rmdir(cred_, unread.parent, unread.name);
        const bool removed = r || gone(r.error());
        if (!removed) failed(unread.shown, r.error().code() == Code::kNotEmpty ? page.error() : r.error());
        top_ok = finish(removed);
        continue;
      }
      // Emptied (or not: a directory not emptied stays, as rm's does).
      const bool ok = f.ok;
      Frame done = std::move(f);
      top_ok = finish(ok && rmdir(done.parent, done.name, done.shown));
    }
    return top_ok;
  }

  Result<void> result() && {
    if (first_) return std::unexpected(std::move(*first_));
    return {};
  }

 private:
  struct Frame {
    Ino parent = 0;
    std::string name;
    std::string shown;
    Ino ino = 0;
    std::string cookie;
    std::vector<DirEntry> page;
    size_t next = 0;
    bool eof = false;
    bool ok = true;  // everything below removed so far
  };

  // One entry of the directory of frame `f`: a file or link removed, a
  // directory pushed to be emptied first.
  void step_into(Frame& f, const std::string& name) {
    const std::string shown = f.shown + "/" + name;
    auto n = client_.lookup(cred_, f.ino, name);
    if (!n) {
      if (!gone(n.error())) f.ok = failed(shown, n.error());
      return;
    }
    if (!n->is_dir()) {
      f.ok = unlink(f.ino, name, shown) && f.ok;
      return;
    }
    // A directory already being emptied on the way here: a cycle, which no
    // POSIX tree has (a broken or hostile meta): descending would never end.
    if (on_stack_.contains(n->ino)) {
      f.ok = failed(shown, Status(Code::kLoop, fmt::format("directory {} is its own ancestor", n->ino)));
      return;
    }
    push(Frame{f.ino, name, shown, n->ino});  // `f` may move: not used after this
  }

  void push(Frame frame) {
    on_stack_.insert(frame.ino);
    stack_.push_back(std::move(frame));
  }

  // Pops the top frame; `gone_now` tells its parent frame whether it went
  // (removed here or by another). Returns it, for the top one.
  bool finish(bool gone_now) {
    on_stack_.erase(stack_.back().ino);
    stack_.pop_back();
    if (!stack_.empty() && !gone_now) stack_.back().ok = false;
    return gone_now;
  }

  bool unlink(Ino parent, const std::string& name, const std::string& shown) {
    auto r = client_.unlink(cred_, parent, name);
    return r || gone(r.error()) || failed(shown, r.error());
  }
  bool rmdir(Ino parent, const std::string& name, const std::string& shown) {
    auto r = client_.rmdir(cred_, parent, name);
    return r || gone(r.error()) || failed(shown, r.error());
  }

  static bool gone(const Status& s) { return s.code() == Code::kNotFound; }

  bool failed(const std::string& shown, const Status& s) {
    Status named = s.with_context(shown);
    if (on_error_) on_error_(named);
    if (!first_) first_ = std::move(named);
    return false;
  }

  Client& client_;
  const Cred& cred_;
  const TreeErrorFn& on_error_;
  std::vector<Frame> stack_;
  std::unordered_set<Ino> on_stack_;  // the inodes of stack_'s frames
  std::optional<Status> first_;
};

}  // namespace

Result<void> remove_tree_at(Client& client, const Cred& cred, Ino parent, const std::string& name,
                            const std::string& shown, const TreeErrorFn& on_error) {
  TreeRemover remover(client, cred, on_error);
  remover.remove(parent, name, shown);
  return std::move(remover).result();
}

}  // namespace weft::client
