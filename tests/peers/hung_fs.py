"""A FUSE file system whose one file hangs mid-read, as a hung NFS or Lustre mount does.

usage: hung_fs.py BACKING MOUNTPOINT BLOCK_AT RELEASE [HANG_DIRS]

MOUNTPOINT/NAME serves the bytes of BACKING (NAME is BACKING's file name; its size as it
grows). A read that reaches byte BLOCK_AT returns what lies before it; the next read, from
BLOCK_AT on, blocks until the file RELEASE exists, then everything is served. While the file
HANG_DIRS exists, listing the mount's folder blocks too (until HANG_DIRS is gone or RELEASE
exists): a glob or a folder scan over a hung mount.

A blocked read gives up (EINTR) when the kernel interrupts it because its caller is killed, as
NFS does since its requests became killable: a process stuck on a hung mount can still exit.
"""
import errno
import os
import stat
import sys
import time

import fusepy
from fusepy import FUSE, FuseOSError, Operations

backing, mountpoint, block_at, release = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
hang_dirs = sys.argv[5] if len(sys.argv) > 5 else None
name = "/" + os.path.basename(backing)


class HungFS(Operations):
    def getattr(self, path, fh=None):
        now = time.time()
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2,
                    "st_mtime": now, "st_ctime": now, "st_atime": now}
        if path != name:
            raise FuseOSError(errno.ENOENT)
        st = os.stat(backing)
        return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1, "st_size": st.st_size,
                "st_mtime": st.st_mtime, "st_ctime": st.st_ctime, "st_atime": st.st_atime}

    def readdir(self, path, fh):
        while hang_dirs and os.path.exists(hang_dirs) and not os.path.exists(release):
            if fusepy._libfuse.fuse_interrupted():
                raise FuseOSError(errno.EINTR)
            time.sleep(0.05)
        return [".", "..", name[1:]]

    def open(self, path, flags):
        if path != name:
            raise FuseOSError(errno.ENOENT)
        return 0

    def read(self, path, size, offset, fh):
        if offset >= block_at:
            while not os.path.exists(release):
                if fusepy._libfuse.fuse_interrupted():
                    raise FuseOSError(errno.EINTR)
                time.sleep(0.05)
        elif offset + size > block_at and not os.path.exists(release):
            size = block_at - offset
        with open(backing, "rb") as f:
            f.seek(offset)
            return f.read(size)


FUSE(HungFS(), mountpoint, foreground=True, nothreads=False, direct_io=True, ro=True, intr=True)
