module github.com/sluicemq/sluice

go 1.26

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/eclipse/paho.golang v0.23.0
	github.com/mochi-mqtt/server/v2 v2.7.9
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/rs/xid v1.4.0 // indirect
	golang.org/x/net v0.43.0 // indirect
)
