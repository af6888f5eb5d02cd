package mqtttest

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

// waitMQTT polls addr until a broker there answers an MQTT 5 CONNECT with a
// successful CONNACK, ctx is done, or exited is closed (the process died).
func waitMQTT(ctx context.Context, addr string, exited <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = Ping(ctx, addr); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), last)
		case <-exited:
			return fmt.Errorf("process exited (last attempt: %v)", last)
		case <-tick.C:
		}
	}
}

// Ping connects to the broker at addr with a throwaway clean session and
// reports whether it answered with a successful CONNACK.
func Ping(ctx context.Context, addr string) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	cp := packets.NewControlPacket(packets.CONNECT).Content.(*packets.Connect)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", 5
	cp.CleanStart = true
	cp.ClientID = "sluice-mqtttest-ping"
	cp.KeepAlive = 5
	if _, err := cp.WriteTo(conn); err != nil {
		return err
	}
	p, err := packets.ReadPacket(conn)
	if err != nil {
		return err
	}
	ca, ok := p.Content.(*packets.Connack)
	if !ok {
		return fmt.Errorf("expected CONNACK, got packet type %d", p.Type)
	}
	if ca.ReasonCode >= 0x80 {
		return fmt.Errorf("CONNACK reason code %d", ca.ReasonCode)
	}
	d2 := packets.NewControlPacket(packets.DISCONNECT)
	_, _ = d2.WriteTo(conn)
	return nil
}
