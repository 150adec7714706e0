// Removing a whole tree by inode: what `weft rm -r` and Python's rmtree do.
#pragma once

#include <string>
#include <string_view>

#include "weft/client.h"

namespace weft::client {

// Removes `name` in directory `parent` and, if it is a directory, everything
// under it. The walk goes by inode from `parent`: a directory replaced by a
// symlink meanwhile is not followed (its link is removed), and nothing moved
// elsewhere meanwhile is reached through the moved path. An entry another
// remover took first is what was wanted (below the top: the top missing is
// kNotFound). An error does not stop the walk: everything else removable is
// removed, `on_error` (if set) hears each error, named by its path under
// `shown`, and the first is returned; a directory not emptied stays.
Result<void> remove_tree_at(Client& client, const Cred& cred, Ino parent, const std::string& name,
                            const std::string& shown, const TreeErrorFn& on_error);

}  // namespace weft::client
