module github.com/sluicemq/sluice

go 1.26

require (
	github.com/eclipse/paho.golang v0.23.0
	github.com/mochi-mqtt/server/v2 v2.7.9
	go.uber.org/goleak v1.3.0
)

require (
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/rs/xid v1.4.0 // indirect
	golang.org/x/net v0.43.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
