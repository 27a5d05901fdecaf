module refill.dev/e2e/images

go 1.25.0

require (
	github.com/alicebob/miniredis/v2 v2.39.0
	github.com/google/go-containerregistry v0.21.7
	golang.org/x/sys v0.46.0
)

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	golang.org/x/sync v0.21.0 // indirect
)
