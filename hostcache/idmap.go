package hostcache

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// cloneName is the lease directory's entry where an idmapped clone of the
// lower tree is mounted.
const cloneName = "lower"

// idmapClone mounts at target a read-only clone of dir through which what
// is owned by uid 0 and gid 0 on disk appears owned by uid and gid id. The
// cache's trees are written by the root runtime, so that is every file;
// anything else would appear owned by the overflow id (65534).
//
// The clone is not recursive (no AT_RECURSIVE): a tree in the cache holds
// no mounts, and overlayfs never crosses a mount point inside a layer.
func idmapClone(dir, target string, id int) error {
	userns, err := openUserns(id)
	if err != nil {
		return err
	}
	defer unix.Close(userns)
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", dir, err)
	}
	defer unix.Close(fd)
	// Read-only: if an unmount ever failed unnoticed, a removal of the lease
	// directory stops at EROFS instead of deleting the shared tree.
	attr := unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("mount_setattr idmap %s: %w", dir, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", target, err)
	}
	return nil
}

// openUserns returns a file descriptor of a new user namespace whose uid and
// gid 0 are host id id. A Go process cannot unshare a user namespace (it is
// multithreaded), so a child is started in one, its namespace opened, and
// the child ended: the descriptor keeps the namespace alive.
func openUserns(id int) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, fmt.Errorf("user namespace: %w", err)
	}
	defer w.Close()
	// The child waits for the pipe to close; it also ends if we die.
	cmd := exec.Command("/bin/sh", "-c", "read _")
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	err = cmd.Start()
	r.Close()
	if err != nil {
		return -1, fmt.Errorf("user namespace: %w", err)
	}
	// Start returns once the child has exec'd, after its maps were written.
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	w.Close()
	cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("user namespace: %w", err)
	}
	return fd, nil
}

// unmountAll unmounts every mount stacked on path; not a mount point (any
// more) is success.
func unmountAll(path string) error {
	for {
		err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil, errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		default:
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
}

// fileID is a file's device and inode: an idmapped clone of a tree has the
// tree's.
type fileID struct{ dev, ino uint64 }

func statID(path string) (fileID, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{st.Dev, st.Ino}, true
}

// owner returns the uid and gid path appears owned by.
func owner(path string) (uid, gid int, ok bool) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
