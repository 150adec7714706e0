#include "client/remove_tree.h"

#include <fmt/format.h>

namespace weft::client {
namespace {

class TreeRemover {
 public:
  TreeRemover(Client& client, const Cred& cred, const TreeErrorFn& on_error)
      : client_(client), cred_(cred), on_error_(on_error) {}

  // False when something under or at `name` stayed.
  bool remove(Ino parent, const std::string& name, const std::string& shown, bool top) {
    auto n = client_.lookup(cred_, parent, name);
    if (!n) return (gone(n.error()) && !top) || failed(shown, n.error());
    bool ok = true;
    if (n->is_dir()) {
      // Page by page: removing entries does not disturb the cookie (meta
      // resumes strictly after a name, gone or not).
      std::string cookie;
      for (;;) {
        auto page = client_.readdir(cred_, n->ino, cookie, 1024);
        if (!page) {
          if (gone(page.error())) return ok;  // removed under us: nothing left to do
          return failed(shown, page.error());
        }
        for (const auto& e : page->entries)
          if (e.name != "." && e.name != "..") ok = remove(n->ino, e.name, shown + "/" + e.name, false) && ok;
        if (page->eof || page->entries.empty()) break;
        cookie = page->cookie;
      }
    }
    if (!ok) return false;  // a directory not emptied stays, as rm's does
    auto r = n->is_dir() ? client_.rmdir(cred_, parent, name) : client_.unlink(cred_, parent, name);
    return r || gone(r.error()) || failed(shown, r.error());
  }

  Result<void> result() && {
    if (first_) return std::unexpected(std::move(*first_));
    return {};
  }

 private:
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
  std::optional<Status> first_;
};

}  // namespace

Result<void> remove_tree_at(Client& client, const Cred& cred, Ino parent, const std::string& name,
                            const std::string& shown, const TreeErrorFn& on_error) {
  TreeRemover remover(client, cred, on_error);
  remover.remove(parent, name, shown, /*top=*/true);
  return std::move(remover).result();
}

}  // namespace weft::client
