module github.com/tether-run/tether

go 1.26.8
