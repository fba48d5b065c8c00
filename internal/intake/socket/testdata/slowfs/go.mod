module slowfs

go 1.26

require (
	github.com/hanwen/go-fuse/v2 v2.12.1 // indirect
	golang.org/x/sys v0.28.0 // indirect
)
