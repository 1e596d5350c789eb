module github.com/sluicelabs/sluice

go 1.26.0

require golang.org/x/time v0.16.0

require gopkg.in/yaml.v3 v3.0.1 // indirect
