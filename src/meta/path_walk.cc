#include "meta/path_walk.h"

#include <deque>
#include <string>

namespace weft::meta {
namespace {

// Splits "a//b/./c" into {"a", "b", ".", "c"} in front of `out`.
void push_components(std::string_view path, std::deque<std::string>& out) {
  std::deque<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) parts.emplace_back(path.substr(i, j - i));
    i = j + 1;
  }
  out.insert(out.begin(), parts.begin(), parts.end());
}

}  // namespace

Result<Inode> resolve_path(MetaStore& store, const Context& ctx, std::string_view path, bool follow_last) {
  if (path.empty()) return error(Code::kNotFound, "empty path");
  if (path.size() > kPathBytesMax) return error(Code::kNameTooLong, "path of {} bytes", path.size());
  if (path[0] != '/') return error(Code::kInvalidArgument, "path '{}' is not absolute", path);
  bool must_be_dir = path.back() == '/';
  std::deque<std::string> todo;
  push_components(path, todo);
  WEFT_TRY(Inode cur, store.getattr(ctx, kRootIno));
  int links = 0;
  while (!todo.empty()) {
    std::string name = std::move(todo.front());
    todo.pop_front();
    if (!cur.is_dir()) return error(Code::kNotDirectory, "'{}' is not under a directory", name);
    WEFT_TRY(Inode next, store.lookup(ctx, cur.ino, name));
    bool last = todo.empty();
    if (next.is_symlink() && (!last || follow_last || must_be_dir)) {
      if (++links > kSymlinkFollowMax) return error(Code::kLoop, "too many symlinks in '{}'", path);
      push_components(next.symlink_target, todo);
      if (next.symlink_target.starts_with('/')) {
        WEFT_TRY(cur, store.getattr(ctx, kRootIno));
      }
      continue;  // relative targets resolve against `cur`, the link's directory
    }
    cur = std::move(next);
  }
  if (must_be_dir && !cur.is_dir()) return error(Code::kNotDirectory, "'{}' is not a directory", path);
  return cur;
}

}  // namespace weft::meta
